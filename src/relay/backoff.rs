//! Backoff policy as pure functions: the retry delay of a failed event, and the pause of the
//! claim loop during an outage. The random draw is a parameter, so tests pin it.

use std::time::Duration;

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

/// The claim loop's pause after `streak` consecutive outage cycles: 100 ms doubling to 5 s.
pub fn outage_pause(streak: u32, unit: f64) -> Duration {
    retry_delay(
        streak.max(1),
        Duration::from_millis(100),
        Duration::from_secs(5),
        unit,
    )
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
