//! The retry scheduler: decides, for each event that failed through its own fault, when it is
//! tried again (exponential backoff with jitter) or that it is dead; and wakes the claimer
//! when the earliest retry it scheduled comes due, so a retry does not wait for the poll.

use std::time::{Duration, Instant};

use actix::{
    Actor, AsyncContext, Context, Handler, MessageResult, Recipient, SpawnHandle, Supervised,
};
use rand::Rng;

use super::backoff;
use super::messages::{PlanRetries, Wake};
use crate::config::RetrySettings;
use crate::db::outbox::Failure;

/// Plans retries and dead letters.
pub struct RetryScheduler {
    settings: RetrySettings,
    claimer: Recipient<Wake>,
    next_wake: Option<(Instant, SpawnHandle)>,
}

impl RetryScheduler {
    /// A scheduler that wakes `claimer` when retries come due.
    pub fn new(settings: RetrySettings, claimer: Recipient<Wake>) -> Self {
        RetryScheduler {
            settings,
            claimer,
            next_wake: None,
        }
    }
}

/// The decision for one failure: pure, given the random draw.
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

impl Actor for RetryScheduler {
    type Context = Context<Self>;
}

impl Supervised for RetryScheduler {
    fn restarting(&mut self, _: &mut Context<Self>) {
        self.next_wake = None;
    }
}

impl Handler<PlanRetries> for RetryScheduler {
    type Result = MessageResult<PlanRetries>;

    fn handle(&mut self, msg: PlanRetries, ctx: &mut Context<Self>) -> Self::Result {
        let mut rng = rand::rng();
        let mut earliest: Option<Duration> = None;
        let failures = msg
            .faults
            .into_iter()
            .map(|fault| {
                let (dead, delay) = plan(&self.settings, fault.attempts, rng.random::<f64>());
                if dead {
                    crate::telemetry::event_dead(&fault.id, &fault.error);
                } else {
                    earliest = Some(earliest.map_or(delay, |e| e.min(delay)));
                    crate::telemetry::event_failed(&fault.id, &fault.error, delay);
                }
                Failure {
                    id: fault.id,
                    error: fault.error,
                    delay_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                    dead,
                }
            })
            .collect();
        if let Some(delay) = earliest {
            // A little after the due time: the row's available_at is set by Postgres' clock
            // when the batch commits, a moment after this plan.
            let due = Instant::now() + delay + Duration::from_millis(50);
            let sooner = self.next_wake.as_ref().is_none_or(|(at, _)| due < *at);
            if sooner {
                if let Some((_, handle)) = self.next_wake.take() {
                    ctx.cancel_future(handle);
                }
                let handle = ctx.run_later(delay + Duration::from_millis(50), |act, _| {
                    act.next_wake = None;
                    act.claimer.do_send(Wake);
                });
                self.next_wake = Some((due, handle));
            }
        }
        MessageResult(failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_after_max_attempts() {
        let s = RetrySettings {
            max_attempts: 3,
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        assert_eq!(plan(&s, 0, 0.0), (false, Duration::from_secs(1)));
        assert_eq!(plan(&s, 1, 0.0), (false, Duration::from_secs(2)));
        assert!(plan(&s, 2, 0.0).0, "third failure kills it");
    }
}
