//! Fault injection for the end-to-end tests: compiled in only with the `test-hooks` feature,
//! armed by `OUTBOX_TEST_FAULT=<point>@<n>` (the `n`-th time the code reaches `point`, counting
//! from 1) or `<point>@<n>+` (that time and every later one). Without the feature every hook is
//! an empty inline function.

/// Panics at `point` when armed for this hit.
#[inline]
pub fn panic_at(point: &'static str) {
    if armed(point) {
        panic!("injected fault: {point}");
    }
}

/// Never returns at `point` when armed for this hit: a loop stuck on something that never ends.
#[inline]
pub async fn stall_at(point: &'static str) {
    if armed(point) {
        tracing::warn!(point, "injected fault: stalling");
        futures::future::pending::<()>().await;
    }
}

#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
fn armed(_: &'static str) -> bool {
    false
}

#[cfg(feature = "test-hooks")]
fn armed(point: &'static str) -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    struct Fault {
        point: String,
        nth: u64,
        onwards: bool,
    }
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let fault = FAULT.get_or_init(|| {
        let spec = std::env::var("OUTBOX_TEST_FAULT").ok()?;
        let (point, nth) = spec.split_once('@').unwrap_or((spec.as_str(), "1"));
        let onwards = nth.ends_with('+');
        Some(Fault {
            point: point.to_string(),
            nth: nth.trim_end_matches('+').parse().unwrap_or(1),
            onwards,
        })
    });
    match fault {
        Some(f) if f.point == point => {
            let hit = HITS.fetch_add(1, Ordering::SeqCst) + 1;
            hit == f.nth || (f.onwards && hit > f.nth)
        }
        _ => false,
    }
}
