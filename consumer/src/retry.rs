//! Waiting policy, as pure functions: the delay before an entry's next delivery after a
//! failure, the delay after a Redis or Postgres outage, and [`ErrorLog`], which keeps an
//! outage from writing one log line per loop iteration.

use std::time::{Duration, Instant};

/// The wait before delivery `delivery + 1` of an entry whose delivery `delivery` failed:
/// `base * 2^(delivery-1)`, capped at `max`, scaled by `jitter` (0.8..1.2 from the caller's
/// random source) so entries that failed together do not retry together.
pub fn retry_delay(delivery: u64, base: Duration, max: Duration, jitter: f64) -> Duration {
    let exp = delivery.saturating_sub(1).min(30) as u32;
    let raw = base.saturating_mul(1u32 << exp).min(max);
    raw.mul_f64(jitter.clamp(0.5, 1.5)).min(max)
}

/// A jitter factor in `0.8..1.2`.
pub fn jitter() -> f64 {
    rand::random_range(0.8..1.2)
}

/// The wait after the `failures`-th consecutive failed round trip to Redis (or Postgres):
/// 100 ms doubling to 5 s, with jitter.
pub fn outage_delay(failures: u32) -> Duration {
    retry_delay(
        u64::from(failures.max(1)),
        Duration::from_millis(100),
        Duration::from_secs(5),
        jitter(),
    )
}

/// Logs an outage's errors at most once per `every`, with how many were not logged between.
#[derive(Debug)]
pub struct ErrorLog {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl ErrorLog {
    /// One line per `every` at most.
    pub fn new(every: Duration) -> ErrorLog {
        ErrorLog {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// Whether this error (seen at `now`) should be logged; if so, also how many were
    /// suppressed since the last line.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// The outage is over: the next error is logged at once.
    pub fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_base_and_caps() {
        let (b, m) = (Duration::from_millis(100), Duration::from_secs(1));
        let d: Vec<u128> = (1..=6)
            .map(|n| retry_delay(n, b, m, 1.0).as_millis())
            .collect();
        assert_eq!(d, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(retry_delay(u64::MAX, b, m, 1.0), m);
        assert!(
            retry_delay(5, b, m, 1.2) <= m,
            "jitter never passes the cap"
        );
        assert_eq!(retry_delay(1, b, m, 0.8).as_millis(), 80);
    }

    #[test]
    fn error_log_admits_one_per_period_and_counts_the_rest() {
        let mut log = ErrorLog::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(log.admit(t0), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_secs(1)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(2)), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(11)), Some(2));
        log.reset();
        assert_eq!(log.admit(t0 + Duration::from_secs(12)), Some(0));
    }
}
