//! One dispatcher actor per topic, with one duty: publish the topic's share of each batch
//! (deduplicating script calls of about 4 MiB of entries each, see `publish`) and own the
//! topic's outage state. The cycle reaches a topic's dispatcher through the topic registry
//! (`topics`), which starts it.
//!
//! A publish that fails as a whole (an outage) is answered with a [`TopicOutage`]: the
//! topic's events wait a pause that doubles with each failure in a row (100 ms to 5 s), and
//! the cycle settles the other topics. On a Redis Cluster a topic lives on one master, so
//! while its pause runs the dispatcher answers at once without asking Redis: a dead master
//! costs its own topics a failed call per pause, and the other topics' cycles nothing.

use std::time::Instant;

use actix::{
    Actor, ActorContext, ActorFutureExt, Context, Handler, ResponseActFuture, Supervised,
    WrapFuture,
};
use uuid::Uuid;

use super::messages::{Publish, TopicOutage};
use super::supervision::{catching, Panicked};
use crate::publish::{Outcome, PublishError, Publisher};
use crate::telemetry::ActorName;
use outbox_core::backoff;

/// Publishes one topic.
pub struct Dispatcher {
    topic: String,
    publisher: Publisher,
    /// The topic's outage, while its publishes fail as a whole.
    down: Option<Down>,
}

/// A topic's publishes failing in a row.
struct Down {
    /// Failed publishes in a row.
    streak: u32,
    /// The last failure, as an outage: answered again while the pause runs.
    error: PublishError,
    /// On a cluster: publishes fail at once until then.
    until: Option<Instant>,
}

impl Dispatcher {
    /// The dispatcher of `topic`, not yet down.
    pub fn new(topic: String, publisher: Publisher) -> Self {
        Dispatcher {
            topic,
            publisher,
            down: None,
        }
    }

    /// While the topic's pause runs (cluster only), the outage to answer without asking Redis.
    fn still_down(&self) -> Option<TopicOutage> {
        let down = self.down.as_ref()?;
        let retry_in = down.until?.checked_duration_since(Instant::now())?;
        Some(TopicOutage {
            error: down.error.clone(),
            retry_in,
        })
    }

    /// Records how a publish that went to Redis ended.
    fn ended(
        &mut self,
        result: Result<Vec<(Uuid, Outcome)>, PublishError>,
    ) -> Result<Vec<(Uuid, Outcome)>, TopicOutage> {
        match result {
            Ok(outcomes) => {
                if let Some(down) = self.down.take() {
                    crate::telemetry::topic_outage_over(&self.topic, down.streak);
                }
                Ok(outcomes)
            }
            Err(error) => {
                let streak = self.down.as_ref().map_or(0, |d| d.streak).saturating_add(1);
                let retry_in = backoff::outage_pause(streak, backoff::unit());
                crate::telemetry::topic_outage(&self.topic, &error, streak, retry_in);
                // On one server every topic shares the outage, and the claim loop's own
                // backoff paces the retries; on a cluster only this topic's master is away.
                let until = self
                    .publisher
                    .is_cluster()
                    .then(|| Instant::now() + retry_in);
                // A loss is repaired once, by the cycle that met it: the answers given
                // during the pause are plain outages.
                let remembered = match &error {
                    PublishError::Behind(behind) => PublishError::Outage(behind.to_string()),
                    other => other.clone(),
                };
                self.down = Some(Down {
                    streak,
                    error: remembered,
                    until,
                });
                Err(TopicOutage { error, retry_in })
            }
        }
    }
}

impl Actor for Dispatcher {
    type Context = Context<Self>;
}

impl Supervised for Dispatcher {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!(topic = %self.topic, "dispatcher restarting");
        crate::telemetry::actor_restarting(ActorName::Dispatcher);
    }
}

impl Handler<Publish> for Dispatcher {
    type Result = ResponseActFuture<Self, Result<Vec<(Uuid, Outcome)>, TopicOutage>>;

    fn handle(&mut self, msg: Publish, _: &mut Context<Self>) -> Self::Result {
        if let Some(outage) = self.still_down() {
            return Box::pin(actix::fut::ready(Err(outage)));
        }
        let publisher = self.publisher.clone();
        let topic = self.topic.clone();
        let publish = async move {
            super::faults::panic_at("dispatch-panic");
            publisher
                .publish(&topic, &msg.chains, msg.maxlen, msg.partitions)
                .await
        };
        Box::pin(
            catching(ActorName::Dispatcher, publish)
                .into_actor(self)
                .map(move |result, act, ctx| {
                    let result = result.unwrap_or_else(|Panicked| {
                        // Restarted by its supervisor; the topic's events wait as after an
                        // outage.
                        ctx.stop();
                        Err(PublishError::Outage(format!(
                            "the dispatcher of {} panicked",
                            act.topic
                        )))
                    });
                    act.ended(result)
                }),
        )
    }
}
