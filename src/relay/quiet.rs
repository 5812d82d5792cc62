//! When to ask producers to stop notifying, and how fast to poll meanwhile.
//!
//! Postgres serializes the commits of notifying transactions, so a relay woken by NOTIFY
//! costs producers that commit many small transactions most of their commit rate. A relay that claims continuously does not need
//! waking: each cycle that finds work starts the next one. While events arrive faster than
//! `relay.quiet_above` events/s (measured over [`WINDOW`]), a replica writes
//! `outbox_wake.busy_until` [`QUIET_FOR`] ahead, so the trigger skips NOTIFY, and polls every
//! [`FAST_POLL`] until that time has passed. It keeps renewing while the rate stays above half
//! the threshold, so a rate near the threshold does not flap between the two modes.
//!
//! The rate is how fast the highest `seq` this replica has claimed advances, not how many
//! events it claimed: every event takes the next `seq`, so each replica sees the whole
//! cluster's arrival rate even when three replicas share it.

use std::time::{Duration, Instant};

/// How far ahead each announcement quiets the trigger.
pub const QUIET_FOR: Duration = Duration::from_secs(1);
/// The poll interval while producers are quiet: an event arriving during a pause of the
/// producers waits at most this long.
pub const FAST_POLL: Duration = Duration::from_millis(5);
/// The span the claim rate is measured over; also the renewal period.
pub const WINDOW: Duration = Duration::from_millis(250);

/// The claimer's view of its own rate and of its announcement.
#[derive(Debug)]
pub struct Quiet {
    threshold: f64,
    window_start: Instant,
    window_seq: Option<i64>,
    latest_seq: Option<i64>,
    polling_fast_until: Option<Instant>,
}

impl Quiet {
    /// Announces above `threshold` events/s; 0 never does.
    pub fn new(threshold: u32, now: Instant) -> Self {
        Quiet {
            threshold: f64::from(threshold),
            window_start: now,
            window_seq: None,
            latest_seq: None,
            polling_fast_until: None,
        }
    }

    /// Notes the highest `seq` a cycle claimed (if any); true when an announcement is due.
    pub fn record(&mut self, max_seq: Option<i64>, now: Instant) -> bool {
        if self.threshold <= 0.0 {
            return false;
        }
        if let Some(seq) = max_seq {
            self.latest_seq = Some(self.latest_seq.map_or(seq, |l| l.max(seq)));
        }
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < WINDOW {
            return false;
        }
        let advanced = match (self.window_seq, self.latest_seq) {
            (Some(from), Some(to)) => (to - from).max(0),
            _ => 0,
        };
        let rate = advanced as f64 / elapsed.as_secs_f64();
        self.window_start = now;
        self.window_seq = self.latest_seq;
        let bar = if self.polling_fast(now) {
            self.threshold / 2.0
        } else {
            self.threshold
        };
        rate >= bar
    }

    /// An announcement was written (by the time `now`): poll fast until it lapses.
    pub fn announced(&mut self, now: Instant) {
        self.polling_fast_until = Some(now + QUIET_FOR);
    }

    /// Producers may not be notifying: poll every [`FAST_POLL`].
    pub fn polling_fast(&self, now: Instant) -> bool {
        self.polling_fast_until.is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn announces_above_the_threshold_and_renews_above_half_of_it() {
        let t0 = Instant::now();
        let mut quiet = Quiet::new(1000, t0);
        assert!(
            !quiet.record(Some(1000), t0 + 250 * MS),
            "no earlier seq to compare with"
        );
        assert!(
            !quiet.record(Some(1100), t0 + 400 * MS),
            "window not over yet"
        );
        // seq 1000 to 1200 in 250 ms = 800/s: below 1000/s.
        assert!(!quiet.record(Some(1200), t0 + 500 * MS));
        // 300 in 250 ms = 1200/s, though this replica claimed only some of them.
        assert!(quiet.record(Some(1500), t0 + 750 * MS));
        quiet.announced(t0 + 752 * MS);
        assert!(quiet.polling_fast(t0 + 1700 * MS));
        // 150 in 250 ms = 600/s: above half, keeps renewing; an older seq changes nothing.
        assert!(!quiet.record(Some(900), t0 + 800 * MS));
        assert!(quiet.record(Some(1650), t0 + 1000 * MS));
        // No claims for 250 ms: lets it lapse.
        assert!(!quiet.record(None, t0 + 1250 * MS));
        assert!(
            !quiet.polling_fast(t0 + 1752 * MS),
            "lapsed a second after the last write"
        );
    }

    #[test]
    fn zero_never_announces() {
        let t0 = Instant::now();
        let mut quiet = Quiet::new(0, t0);
        assert!(!quiet.record(Some(1), t0 + Duration::from_secs(1)));
        assert!(!quiet.record(Some(1_000_000), t0 + Duration::from_secs(2)));
        assert!(!quiet.polling_fast(t0));
    }
}
