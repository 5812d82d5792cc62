//! This process's throughput over the last hour: a ring of per-second counts of published
//! and failed events, fed by the claimer after each cycle, read by the heartbeat.
//!
//! Why in the process and not from the table: a failure leaves no row per attempt, and in
//! delete mode (`retention.published_for = 0s`) a published event leaves no row at all. Each
//! replica reports its ring with its heartbeat (`outbox_replicas.throughput`), so whichever
//! replica serves the Overview can sum the cluster's last hour. A replica that dies takes its
//! history with it; that is the price of needing no metrics system.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Seconds kept.
const SLOTS: usize = 3600;
/// Minutes reported.
pub const MINUTES: usize = 60;

#[derive(Clone, Copy)]
struct Slot {
    /// The unix second this slot counts; a slot of an older second is stale.
    second: u64,
    published: u64,
    failed: u64,
}

/// The ring; the relay shares one between the claimer and the heartbeat.
pub struct Throughput {
    slots: Mutex<[Slot; SLOTS]>,
}

/// Per-minute counts of the last hour, oldest first; the last entry is the current minute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Minutes {
    /// Unix minute of the last entry.
    pub minute: u64,
    /// Events published per minute.
    pub published: Vec<u64>,
    /// Events failed (to be retried, or dead-lettered) per minute.
    pub failed: Vec<u64>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Default for Throughput {
    fn default() -> Self {
        Self::new()
    }
}

impl Throughput {
    /// An empty ring.
    pub const fn new() -> Throughput {
        Throughput {
            slots: Mutex::new(
                [Slot {
                    second: 0,
                    published: 0,
                    failed: 0,
                }; SLOTS],
            ),
        }
    }

    /// Counts events now.
    pub fn record(&self, published: u64, failed: u64) {
        self.record_at(now_secs(), published, failed);
    }

    fn record_at(&self, second: u64, published: u64, failed: u64) {
        // A poisoned lock only means another thread panicked mid-update of a counter: the
        // counts are still usable, so take them rather than lose telemetry.
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut slots[(second % SLOTS as u64) as usize];
        if slot.second != second {
            *slot = Slot {
                second,
                published: 0,
                failed: 0,
            };
        }
        slot.published += published;
        slot.failed += failed;
    }

    /// Events published in the last 60 seconds.
    pub fn published_last_minute(&self) -> u64 {
        self.last_minute_at(now_secs())
    }

    fn last_minute_at(&self, now: u64) -> u64 {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .filter(|s| s.second + 60 > now && s.second <= now)
            .map(|s| s.published)
            .sum()
    }

    /// The last hour, per minute.
    pub fn minutes(&self) -> Minutes {
        self.minutes_at(now_secs())
    }

    fn minutes_at(&self, now: u64) -> Minutes {
        let minute = now / 60;
        let first = minute.saturating_sub(MINUTES as u64 - 1);
        let mut out = Minutes {
            minute,
            published: vec![0; MINUTES],
            failed: vec![0; MINUTES],
        };
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for s in slots.iter().filter(|s| s.second <= now) {
            let m = s.second / 60;
            if m >= first {
                let i = (m - first) as usize;
                out.published[i] += s.published;
                out.failed[i] += s.failed;
            }
        }
        out
    }
}

impl Minutes {
    /// Adds another replica's minutes, aligned on the clock (their last minute may differ).
    pub fn add(&mut self, other: &Minutes) {
        let last = other.published.len().min(other.failed.len());
        for j in 0..last {
            // Entry j of `other` counts the minute `other.minute - (last - 1 - j)`.
            let Some(m) = other.minute.checked_sub((last - 1 - j) as u64) else {
                continue;
            };
            let Some(back) = self.minute.checked_sub(m) else {
                continue; // newer than our window: a replica with a clock ahead
            };
            if let Some(i) = (MINUTES - 1).checked_sub(back as usize) {
                self.published[i] += other.published[j];
                self.failed[i] += other.failed[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_minute_and_age_out() {
        let t = Throughput::new();
        let now = 1_000_000 * 60 + 30;
        t.record_at(now, 5, 1);
        t.record_at(now - 40, 2, 0);
        t.record_at(now - 120, 7, 3);
        t.record_at(now - 4000, 100, 100); // older than the ring: overwritten or ignored
        assert_eq!(t.last_minute_at(now), 7);
        let m = t.minutes_at(now);
        assert_eq!(m.minute, 1_000_000);
        assert_eq!(m.published[MINUTES - 1], 5);
        assert_eq!(m.published[MINUTES - 2], 2);
        assert_eq!(m.published[MINUTES - 3], 7);
        assert_eq!(m.failed[MINUTES - 3], 3);
        assert_eq!(m.published.iter().sum::<u64>(), 14);
    }

    #[test]
    fn replicas_add_up_on_the_clock() {
        let mut a = Minutes {
            minute: 100,
            published: vec![1; MINUTES],
            failed: vec![0; MINUTES],
        };
        // A replica whose last report is two minutes old.
        let mut b = Minutes {
            minute: 98,
            published: vec![0; MINUTES],
            failed: vec![0; MINUTES],
        };
        b.published[MINUTES - 1] = 10;
        b.published[0] = 4; // minute 39: before a's window
        a.add(&b);
        assert_eq!(a.published[MINUTES - 3], 11);
        assert_eq!(a.published.iter().sum::<u64>(), MINUTES as u64 + 10);
    }
}
