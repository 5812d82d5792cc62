//! A supervised actor that runs one maintenance job on a timer, one run at a time.
//!
//! Each maintenance duty is a [`Job`]: a config and a `run_once` returning a result. The jobs:
//!
//! - `cleaner::Cleaner`: the retention cleaner, deleting old published rows;
//! - `heartbeat::Heartbeat`: this replica's row in `outbox_replicas`;
//! - `stats::BacklogSampler`: the pending, dead and oldest-age gauges;
//! - `groups::GroupKeeper`: declared groups' lag metrics, and `redis.trim_acked`;
//! - `readiness::ReadinessCheck`: the Postgres and Redis pings `/readyz` answers from;
//! - `marks::MarksKeeper`: the streams' marks loaded, saved, and repaired topics' barriers
//!   lifted;
//! - `registrar::TopicRegistrar`: the topics met recorded in `outbox_topics`;
//! - `sweeper::DedupSweeper`: the topics' retired dedup sets unlinked.
//!
//! The actor only schedules; a failed run is logged and counted and the next tick tries
//! again, so an outage never turns into a restart loop; a panic in a run restarts the actor
//! (see `supervision`).

use std::time::Duration;

use actix::{Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Supervised, WrapFuture};
use futures::future::BoxFuture;

use crate::telemetry::ActorName;

/// One maintenance duty.
pub trait Job: Clone + Unpin + 'static {
    /// For logs and metrics.
    const ACTOR: ActorName;
    /// Its failures show elsewhere already (an outage the claim cycles log): a failed run is
    /// counted and logged at debug level only.
    const QUIET: bool = false;
    /// Why a run failed.
    type Error: std::fmt::Display + Send + 'static;
    /// Time between runs.
    fn interval(&self) -> Duration;
    /// One run.
    fn run_once(&self) -> BoxFuture<'static, Result<(), Self::Error>>;
}

/// Runs `J` every `J::interval()`.
pub struct Periodic<J: Job> {
    job: J,
    running: bool,
}

impl<J: Job> Periodic<J> {
    /// An actor for `job`.
    pub fn new(job: J) -> Self {
        Periodic {
            job,
            running: false,
        }
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.running {
            return;
        }
        self.running = true;
        let run = super::supervision::catching(J::ACTOR, self.job.run_once());
        ctx.spawn(run.into_actor(self).map(|result, act, ctx| {
            act.running = false;
            match result {
                Ok(Ok(())) => {}
                Ok(Err(error)) if J::QUIET => {
                    crate::telemetry::job_failed_quietly(J::ACTOR, &error)
                }
                Ok(Err(error)) => crate::telemetry::job_failed(J::ACTOR, &error),
                // Its supervisor restarts it.
                Err(_) => ctx.stop(),
            }
        }));
    }
}

impl<J: Job> Actor for Periodic<J> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.tick(ctx);
        ctx.run_interval(self.job.interval(), |act, ctx| act.tick(ctx));
    }
}

impl<J: Job> Supervised for Periodic<J> {
    fn restarting(&mut self, _: &mut Context<Self>) {
        crate::telemetry::actor_restarting(J::ACTOR);
        self.running = false;
    }
}
