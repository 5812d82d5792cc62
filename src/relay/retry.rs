//! The retry policy and the retry scheduler.
//!
//! The policy is pure: for each event that failed through its own fault, when it is tried again
//! (exponential backoff with jitter) or that it is dead. The claim cycle applies it in its own
//! transaction, with no actor round trip while the transaction is open. The scheduler actor only
//! wakes the claimer when the earliest retry comes due, so a retry does not wait for the poll.

use std::time::{Duration, Instant};

use actix::{Actor, AsyncContext, Context, Handler, SpawnHandle, Supervised};

use super::messages::{Fault, RetryDue, Wake};
use crate::config::RetrySettings;
use crate::db::outbox::Failure;
use outbox_core::backoff;

/// The decision for one failure, given the random draw in `[0, 1)`: dead, or the delay.
pub fn plan(settings: &RetrySettings, attempts_before: i32, unit: f64) -> (bool, Duration) {
    let attempts = u32::try_from(attempts_before.max(0))
        .unwrap_or(0)
        .saturating_add(1);
    if attempts >= settings.max_attempts {
        return (true, Duration::ZERO);
    }
    (
        false,
        backoff::retry_delay(attempts, settings.base, settings.max, unit),
    )
}

/// What to write for each fault of a batch; `draw` gives each one's jitter.
pub fn plan_all(
    settings: &RetrySettings,
    faults: Vec<Fault>,
    mut draw: impl FnMut() -> f64,
) -> Vec<Failure> {
    faults
        .into_iter()
        .map(|fault| {
            let (dead, delay) = plan(settings, fault.attempts, draw());
            Failure {
                id: fault.id,
                error: fault.error,
                delay_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                dead,
            }
        })
        .collect()
}

/// A little after the due time: the row's `available_at` is set by Postgres' clock when the
/// batch commits, a moment after the plan.
const DUE_SLACK: Duration = Duration::from_millis(50);

/// Wakes the claimer when the earliest scheduled retry comes due.
#[derive(Default)]
pub struct RetryScheduler {
    next_wake: Option<(Instant, SpawnHandle)>,
}

impl Actor for RetryScheduler {
    type Context = Context<Self>;
}

impl Supervised for RetryScheduler {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.next_wake = None;
    }
}

impl Handler<RetryDue> for RetryScheduler {
    type Result = ();

    fn handle(&mut self, msg: RetryDue, ctx: &mut Context<Self>) {
        let wait = msg.after + DUE_SLACK;
        let due = Instant::now() + wait;
        if self.next_wake.as_ref().is_some_and(|(at, _)| *at <= due) {
            return;
        }
        if let Some((_, handle)) = self.next_wake.take() {
            ctx.cancel_future(handle);
        }
        let wake = msg.wake;
        let handle = ctx.run_later(wait, move |act, _| {
            act.next_wake = None;
            wake.do_send(Wake);
        });
        self.next_wake = Some((due, handle));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn settings() -> RetrySettings {
        RetrySettings {
            max_attempts: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }

    #[test]
    fn dead_after_max_attempts() {
        let s = settings();
        assert_eq!(plan(&s, 0, 0.0), (false, Duration::from_secs(1)));
        assert_eq!(plan(&s, 1, 0.0), (false, Duration::from_secs(2)));
        assert!(plan(&s, 2, 0.0).0, "third failure kills it");
    }

    #[test]
    fn a_batch_plan_keeps_ids_and_errors() {
        let faults = vec![
            Fault {
                id: Uuid::new_v4(),
                attempts: 0,
                error: "WRONGTYPE".into(),
            },
            Fault {
                id: Uuid::new_v4(),
                attempts: 2,
                error: "too big".into(),
            },
        ];
        let ids: Vec<Uuid> = faults.iter().map(|f| f.id).collect();
        let planned = plan_all(&settings(), faults, || 0.0);
        assert_eq!(planned[0].id, ids[0]);
        assert_eq!((planned[0].dead, planned[0].delay_ms), (false, 1000));
        assert_eq!(planned[0].error, "WRONGTYPE");
        assert!(planned[1].dead);
    }
}
