//! Which failing events this replica has already logged, so an event logs one line when it
//! starts failing and one when it goes dead, not one per retry.
//!
//! A poison event is tried `retry.max_attempts` times; logging each attempt at WARN filled the
//! demo's log (and an operator's) with the same error every few seconds. The first failure
//! still gets its WARN line and the death its ERROR line, so a real failure is as visible as
//! before; the retries between them are counted in `outbox_events_failed_total` and logged at
//! DEBUG (`telemetry::event_failed_again`). The memory is this replica's only: an event retried by another replica may log its
//! first line there too, which errs on the side of saying more.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// Events remembered at most; beyond it the oldest are forgotten (their next failure is logged
/// again, which costs a line, not a failure unseen).
const CAPACITY: usize = 4096;

/// The events whose failure was logged and that are not dead yet.
#[derive(Debug)]
pub(super) struct FailureLog {
    logged: HashMap<Uuid, Instant>,
    /// A retry comes at most `retry.max` after the failure before it; an event not seen
    /// failing for longer was published, discarded, or retried elsewhere.
    forget_after: Duration,
}

impl FailureLog {
    /// An empty memory for retries at most `retry_max` apart.
    pub(super) fn new(retry_max: Duration) -> FailureLog {
        FailureLog {
            logged: HashMap::new(),
            forget_after: retry_max.saturating_mul(2) + Duration::from_secs(60),
        }
    }

    /// Records a failure of `id` (to be retried) at `now`: true when it is news, the event's
    /// first failure here since it last went dead or was forgotten.
    pub(super) fn failed(&mut self, id: Uuid, now: Instant) -> bool {
        if self.logged.len() >= CAPACITY && !self.logged.contains_key(&id) {
            let horizon = self.forget_after;
            self.logged
                .retain(|_, at| now.saturating_duration_since(*at) < horizon);
            if self.logged.len() >= CAPACITY {
                self.logged.clear();
            }
        }
        match self.logged.insert(id, now) {
            None => true,
            Some(before) => now.saturating_duration_since(before) >= self.forget_after,
        }
    }

    /// `id` went dead: its next failure (after an operator's retry) is news again.
    pub(super) fn dead(&mut self, id: &Uuid) {
        self.logged.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_when_an_event_starts_failing_and_again_after_it_went_dead() {
        let mut log = FailureLog::new(Duration::from_secs(10));
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let t = Instant::now();
        assert!(log.failed(a, t), "a's first failure is news");
        assert!(
            !log.failed(a, t + Duration::from_secs(1)),
            "its retry's is not"
        );
        assert!(
            log.failed(b, t + Duration::from_secs(1)),
            "another event's is"
        );
        log.dead(&a);
        assert!(
            log.failed(a, t + Duration::from_secs(30)),
            "retried by an operator after it went dead: news again"
        );
    }

    #[test]
    fn an_event_not_seen_failing_for_long_is_news_again() {
        let mut log = FailureLog::new(Duration::from_secs(10));
        let a = Uuid::new_v4();
        let t = Instant::now();
        assert!(log.failed(a, t));
        assert!(!log.failed(a, t + Duration::from_secs(79)));
        assert!(log.failed(a, t + Duration::from_secs(79 + 80)));
    }

    #[test]
    fn the_memory_stays_bounded() {
        let mut log = FailureLog::new(Duration::from_secs(10));
        let t = Instant::now();
        for _ in 0..CAPACITY * 3 {
            log.failed(Uuid::new_v4(), t);
        }
        assert!(log.logged.len() <= CAPACITY);
    }
}
