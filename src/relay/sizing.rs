//! How many rows a claim should lock when events are big.
//!
//! A claim statement stops returning rows at `relay.batch_bytes`, but Postgres still locks and
//! reads (detoasts, casts to text) every row up to the row limit before the cut. With events
//! of a megabyte, a thousand-row limit means a gigabyte read per claim to keep four. So the
//! row limit follows the size of recent events: the byte budget over the typical event,
//! with room to spare, never above `relay.batch_size`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::db::outbox::BatchLimits;

/// The typical bytes of an event in recent claims, shared by a replica's cycles.
#[derive(Debug, Clone, Default)]
pub struct SizeHint {
    typical: Arc<AtomicI64>,
}

impl SizeHint {
    /// `limits` with the row limit cut to what the byte budget can take of events of the
    /// typical size, twice over (sizes vary; a short batch costs a cycle, a long one only
    /// reads rows it leaves).
    pub fn limits(&self, limits: BatchLimits) -> BatchLimits {
        let typical = self.typical.load(Ordering::Relaxed);
        if typical <= 0 {
            return limits;
        }
        BatchLimits {
            rows: rows_for(limits.bytes, typical, limits.rows),
            bytes: limits.bytes,
        }
    }

    /// Learns from a claim of `rows` events holding `bytes`.
    pub fn observe(&self, rows: usize, bytes: i64) {
        if rows > 0 {
            self.typical
                .store((bytes / rows as i64).max(1), Ordering::Relaxed);
        }
    }

    /// The rows a claim of followers should lock for `bytes` left in the budget, after heads
    /// of `head_bytes` over `heads` rows (the same reasoning, from the heads just claimed).
    pub fn run_rows(limits: BatchLimits, heads: usize, head_bytes: i64, bytes: i64) -> i64 {
        if heads == 0 || bytes <= 0 {
            return 0;
        }
        rows_for(bytes, (head_bytes / heads as i64).max(1), limits.rows)
    }
}

/// Rows to lock for `bytes` of events of `typical` size: twice what fits, at most `max`.
fn rows_for(bytes: i64, typical: i64, max: i64) -> i64 {
    (2 * bytes / typical.max(1) + 1).clamp(1, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: BatchLimits = BatchLimits {
        rows: 1000,
        bytes: 8 * 1024 * 1024,
    };

    #[test]
    fn small_events_keep_the_row_limit_and_big_ones_cut_it() {
        let hint = SizeHint::default();
        assert_eq!(hint.limits(LIMITS), LIMITS, "nothing learnt yet");
        hint.observe(1000, 300_000);
        assert_eq!(hint.limits(LIMITS).rows, 1000);
        hint.observe(4, 4 * 1024 * 1024);
        assert_eq!(hint.limits(LIMITS).rows, 17);
        assert_eq!(hint.limits(LIMITS).bytes, LIMITS.bytes);
        hint.observe(0, 0);
        assert_eq!(
            hint.limits(LIMITS).rows,
            17,
            "an empty claim teaches nothing"
        );
    }

    #[test]
    fn followers_get_rows_for_what_the_heads_left() {
        assert_eq!(SizeHint::run_rows(LIMITS, 3, 3_000_000, 1_000_000), 3);
        assert_eq!(SizeHint::run_rows(LIMITS, 100, 30_000, 8_000_000), 1000);
        assert_eq!(SizeHint::run_rows(LIMITS, 3, 3_000_000, 0), 0);
        assert_eq!(SizeHint::run_rows(LIMITS, 0, 0, 1_000_000), 0);
    }
}
