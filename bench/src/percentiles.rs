//! Latency percentiles from an HDR histogram (the `hdrhistogram` crate): samples are kept
//! as counts per value bucket, not as a sorted list, so a ten-minute soak costs no more memory
//! than a two-second run, and each percentile is the one definition HdrHistogram gives
//! everywhere.

use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;

/// Four significant digits: a recorded value is within 0.01% of the sample, far below the
/// 0.1 ms the figures are printed with.
const SIGNIFICANT_DIGITS: u8 = 4;

/// The largest latency told apart; a longer one counts as this long.
const HIGHEST: Duration = Duration::from_secs(3600);

/// A set of latencies, recorded in microseconds.
#[derive(Debug, Clone)]
pub struct Percentiles {
    histogram: Histogram<u64>,
}

impl Percentiles {
    /// The latencies `ms`, in milliseconds.
    pub fn from_ms(ms: impl IntoIterator<Item = f64>) -> anyhow::Result<Percentiles> {
        let highest = u64::try_from(HIGHEST.as_micros()).unwrap_or(u64::MAX);
        let mut histogram =
            Histogram::new_with_max(highest, SIGNIFICANT_DIGITS).context("a latency histogram")?;
        for ms in ms {
            // `as` saturates: a negative latency (none is measured) counts as 0.
            histogram.saturating_record((ms * 1000.0).round() as u64);
        }
        Ok(Percentiles { histogram })
    }

    /// Latencies recorded.
    pub fn len(&self) -> u64 {
        self.histogram.len()
    }

    /// True when none was recorded.
    pub fn is_empty(&self) -> bool {
        self.histogram.is_empty()
    }

    /// The latency at percentile `p` (0-100), ms; `None` when there are none.
    pub fn ms(&self, p: f64) -> Option<f64> {
        (!self.is_empty()).then(|| micros_to_ms(self.histogram.value_at_percentile(p)))
    }

    /// The longest latency, ms; `None` when there are none.
    pub fn max_ms(&self) -> Option<f64> {
        (!self.is_empty()).then(|| micros_to_ms(self.histogram.max()))
    }
}

fn micros_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the histogram's precision of `want`.
    fn close(got: Option<f64>, want: f64) -> bool {
        got.is_some_and(|got| (got - want).abs() <= want * 1e-4 + 1e-9)
    }

    #[test]
    fn percentiles_are_the_samples_at_their_rank() {
        let p = Percentiles::from_ms((1..=1000).map(f64::from)).expect("histogram");
        assert_eq!(p.len(), 1000);
        // Percentile p is the sample of rank ceil(p% of n); where p% of n is a whole number,
        // floating point may land on the next rank.
        for (pct, rank) in [(50.0, 500.0), (99.0, 990.0), (99.9, 999.0)] {
            let got = p.ms(pct);
            assert!(
                close(got, rank) || close(got, rank + 1.0),
                "p{pct}: {got:?}"
            );
        }
        assert!(close(p.ms(75.5), 755.0), "{:?}", p.ms(75.5));
        assert!(close(p.max_ms(), 1000.0), "{:?}", p.max_ms());
        // Below 32.768 ms (2^15 µs) every microsecond is its own bucket: exact.
        let fine = Percentiles::from_ms([0.2, 1.5, 12.3]).expect("histogram");
        assert_eq!((fine.ms(0.0), fine.ms(50.0)), (Some(0.2), Some(1.5)));
        assert_eq!(fine.max_ms(), Some(12.3));
    }

    #[test]
    fn no_samples_no_figures() {
        let p = Percentiles::from_ms([]).expect("histogram");
        assert!(p.is_empty());
        assert_eq!((p.ms(50.0), p.max_ms()), (None, None));
    }

    #[test]
    fn a_latency_beyond_the_range_counts_as_the_longest() {
        let p = Percentiles::from_ms([1.0, 7_200_000.0]).expect("histogram");
        assert!(close(p.max_ms(), 3_600_000.0), "{:?}", p.max_ms());
    }
}
