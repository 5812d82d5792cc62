//! Backoff policy as pure functions, one for the relay and the consumers: the delay before a
//! failed event (or entry) is tried again, and the pause after an outage. The random draw is a
//! parameter ([`unit`] draws one), so tests pin it. [`ErrorLog`] keeps an outage from writing
//! one log line per loop iteration.

use std::time::{Duration, Instant};

/// `base * 2^(attempts-1)`, capped at `max`. `attempts` counts failures so far (>= 1).
pub fn nominal_delay(attempts: u32, base: Duration, max: Duration) -> Duration {
    let exponent = attempts.saturating_sub(1).min(62);
    let factor = 1u64 << exponent;
    let nanos = (base.as_nanos()).saturating_mul(u128::from(factor));
    let capped = nanos.min(max.as_nanos());
    Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
}

/// The nominal delay with jitter: uniformly in `[0.8, 1.0]` of it, driven by `unit` in
/// `[0, 1)`. Jitter spreads the retries of events that failed together (a burst of WRONGTYPE
/// on one topic), and staying below the nominal value keeps `max` a true upper bound.
pub fn jittered(nominal: Duration, unit: f64) -> Duration {
    let unit = unit.clamp(0.0, 1.0);
    nominal.mul_f64(1.0 - 0.2 * unit)
}

/// The retry delay after the `attempts`-th failure.
pub fn retry_delay(attempts: u32, base: Duration, max: Duration, unit: f64) -> Duration {
    jittered(nominal_delay(attempts, base, max), unit)
}

/// The pause after `streak` consecutive failed round trips to Redis or Postgres: 100 ms
/// doubling to 5 s, with jitter.
pub fn outage_pause(streak: u32, unit: f64) -> Duration {
    retry_delay(
        streak.max(1),
        Duration::from_millis(100),
        Duration::from_secs(5),
        unit,
    )
}

/// A random draw in `[0, 1)` for [`jittered`], [`retry_delay`] and [`outage_pause`].
pub fn unit() -> f64 {
    rand::random::<f64>()
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
    use proptest::prelude::*;

    #[test]
    fn doubles_from_base() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(600);
        assert_eq!(nominal_delay(1, base, max), Duration::from_secs(1));
        assert_eq!(nominal_delay(2, base, max), Duration::from_secs(2));
        assert_eq!(nominal_delay(4, base, max), Duration::from_secs(8));
        assert_eq!(nominal_delay(20, base, max), max);
        assert_eq!(nominal_delay(u32::MAX, base, max), max);
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

    #[test]
    fn outages_pause_from_100ms_to_5s() {
        assert_eq!(outage_pause(0, 0.0), Duration::from_millis(100));
        assert_eq!(outage_pause(2, 0.0), Duration::from_millis(200));
        assert_eq!(outage_pause(99, 0.0), Duration::from_secs(5));
        assert!((0.0..1.0).contains(&unit()));
    }

    proptest! {
        #[test]
        fn delay_is_within_jitter_of_nominal_and_never_over_max(
            attempts in 1u32..200,
            base_ms in 1u64..10_000,
            extra_ms in 0u64..1_000_000,
            unit in 0.0f64..1.0,
        ) {
            let base = Duration::from_millis(base_ms);
            let max = base + Duration::from_millis(extra_ms);
            let nominal = nominal_delay(attempts, base, max);
            let d = retry_delay(attempts, base, max, unit);
            prop_assert!(d <= nominal);
            prop_assert!(d <= max);
            prop_assert!(d >= nominal.mul_f64(0.8) - Duration::from_nanos(1));
        }

        #[test]
        fn nominal_never_decreases_with_attempts(
            attempts in 1u32..100,
            base_ms in 1u64..10_000,
            extra_ms in 0u64..1_000_000,
        ) {
            let base = Duration::from_millis(base_ms);
            let max = base + Duration::from_millis(extra_ms);
            prop_assert!(nominal_delay(attempts, base, max) <= nominal_delay(attempts + 1, base, max));
            prop_assert!(nominal_delay(attempts, base, max) >= base.min(max));
        }
    }
}
