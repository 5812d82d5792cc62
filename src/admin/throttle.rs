//! Guessing tokens is made slow: after `admin.failed_logins_per_minute` wrong tokens from one
//! client address within a minute, that address is answered 429 until the minute is over,
//! before its token is even compared, so a right guess during the block gains nothing.
//!
//! Own code rather than `governor`: a rate limiter counts every request and cannot be asked
//! "would this one be refused?" without spending a cell, while a login throttle must count
//! failures only (an API client sends its token with every call) and refuse before the check.
//! The count is per replica, which is what a guesser behind one Service meets anyway.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses remembered before expired windows are swept (a bound on memory under a flood).
const SWEEP_ABOVE: usize = 10_000;

/// Failed token attempts per client address.
#[derive(Debug)]
pub struct Throttle {
    limit: u32,
    window: Duration,
    seen: Mutex<HashMap<IpAddr, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Throttle {
    /// At most `limit` failures per `window` per address; 0 turns the throttle off.
    pub fn new(limit: u32, window: Duration) -> Self {
        Throttle {
            limit,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// How long `ip` must still wait, when it has used up its failures for this window.
    pub fn refused(&self, ip: IpAddr) -> Option<Duration> {
        if self.limit == 0 {
            return None;
        }
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let window = seen.get(&ip)?;
        let left = self.window.checked_sub(window.started.elapsed())?;
        (window.failures >= self.limit && !left.is_zero()).then_some(left)
    }

    /// Counts one wrong token from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        if self.limit == 0 {
            return;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() > SWEEP_ABOVE {
            seen.retain(|_, w| w.started.elapsed() < self.window);
        }
        let now = Instant::now();
        let window = seen.entry(ip).or_insert(Window {
            started: now,
            failures: 0,
        });
        if window.started.elapsed() >= self.window {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn an_address_is_refused_after_its_failures_and_only_until_the_window_ends() {
        let throttle = Throttle::new(3, Duration::from_millis(300));
        for _ in 0..3 {
            assert_eq!(throttle.refused(A), None);
            throttle.failed(A);
        }
        let wait = throttle.refused(A).expect("refused after 3 failures");
        assert!(wait <= Duration::from_millis(300));
        assert_eq!(
            throttle.refused(B),
            None,
            "other addresses are not affected"
        );
        std::thread::sleep(Duration::from_millis(320));
        assert_eq!(throttle.refused(A), None, "a new window starts clean");
        throttle.failed(A);
        assert_eq!(throttle.refused(A), None, "one failure in the new window");
    }

    #[test]
    fn a_limit_of_zero_never_refuses() {
        let throttle = Throttle::new(0, Duration::from_secs(60));
        for _ in 0..100 {
            throttle.failed(A);
        }
        assert_eq!(throttle.refused(A), None);
    }
}
