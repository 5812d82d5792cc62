//! The claimer actor: schedules claim cycles and routes their results.
//!
//! It runs one cycle at a time, woken by NOTIFY (through the listener), by its poll timer,
//! and by the retry scheduler. A full batch means more is waiting: it loops at once. An
//! outage backs off with jitter and marks the relay not-ready until a cycle succeeds again.
//! It never panics and never stops on an error: a failed cycle is logged, counted and retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorFutureExt, AsyncContext, Context, Handler, ResponseFuture, Supervised, WrapFuture,
};
use rand::Rng;
use tokio::sync::oneshot;

use super::backoff;
use super::cycle::{run_once, CycleDeps, CycleError, CycleReport};
use super::health::Health;
use super::messages::{Drain, Wake};
use super::quiet::{self, Quiet};

/// Claims and publishes batches.
pub struct Claimer {
    deps: CycleDeps,
    health: Arc<Health>,
    poll_interval: Duration,
    workers: usize,
    in_flight: usize,
    wake_pending: bool,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
    outage_streak: u32,
    backing_off: bool,
    quiet: Quiet,
    announcing: bool,
    fast_polling: bool,
    slots_full_until: Option<Instant>,
}

/// How long a replica whose cycle found every claim slot held runs one cycle at a time.
const SLOTS_FULL_FOR: Duration = Duration::from_secs(1);

impl Claimer {
    /// A claimer that polls at least every `poll_interval` and runs up to `workers` claim
    /// transactions at once (they skip each other's locked rows like separate replicas do),
    /// and quiets producers' NOTIFY while events arrive faster than `quiet_above` per second.
    pub fn new(
        deps: CycleDeps,
        health: Arc<Health>,
        poll_interval: Duration,
        workers: usize,
        quiet_above: u32,
    ) -> Self {
        Claimer {
            deps,
            health,
            poll_interval,
            workers: workers.max(1),
            in_flight: 0,
            wake_pending: false,
            draining: false,
            drained: Vec::new(),
            outage_streak: 0,
            backing_off: false,
            quiet: Quiet::new(quiet_above, Instant::now()),
            announcing: false,
            fast_polling: false,
            slots_full_until: None,
        }
    }

    /// Cycles this replica may run at once: `workers`, or one while the cluster's claim slots
    /// were recently all taken (a second cycle would only spend a transaction failing its try).
    fn concurrency(&self) -> usize {
        match self.slots_full_until {
            Some(until) if Instant::now() < until => 1,
            _ => self.workers,
        }
    }

    /// Writes the announcement that quiets producers (see `quiet`), one write at a time.
    fn announce(&mut self, ctx: &mut Context<Self>) {
        if self.announcing {
            return;
        }
        self.announcing = true;
        let pool = self.deps.pool.clone();
        let write = async move {
            let mut conn = pool.get().await.map_err(crate::db::DbError::from)?;
            crate::db::wake::announce_busy(&mut conn, quiet::QUIET_FOR).await
        }
        .into_actor(self)
        .map(|result, act, ctx| {
            act.announcing = false;
            match result {
                Ok(()) => {
                    act.quiet.announced(Instant::now());
                    if !act.fast_polling {
                        act.fast_polling = true;
                        crate::telemetry::producers_quiet(true);
                        act.fast_poll(ctx);
                    }
                }
                // Producers keep notifying: nothing is late, only their commits are slower.
                Err(error) => tracing::debug!("could not quiet producers: {error}"),
            }
        });
        ctx.spawn(write);
    }

    /// While producers may not notify, look for work every `FAST_POLL`.
    fn fast_poll(&mut self, ctx: &mut Context<Self>) {
        if !self.quiet.polling_fast(Instant::now()) {
            self.fast_polling = false;
            crate::telemetry::producers_quiet(false);
            return;
        }
        // Only when idle: a running cycle that finds work starts the next one itself, and a
        // second cycle started beside it would only compete for the same keys (a hot key's
        // drain lost a quarter of its speed to that).
        if self.in_flight == 0 {
            self.wake(ctx);
        }
        ctx.run_later(quiet::FAST_POLL, |act, ctx| act.fast_poll(ctx));
    }

    /// Something may be waiting (a notification, the poll timer, a retry coming due).
    fn wake(&mut self, ctx: &mut Context<Self>) {
        if self.draining {
            return;
        }
        if self.backing_off || self.in_flight > 0 {
            // The running cycle may have scanned before this work committed, or it holds
            // the key head the new work queues behind: look again when it ends.
            self.wake_pending = true;
        }
        if !self.backing_off && self.in_flight < self.concurrency() {
            // Start now rather than after the running cycle's publish and commit: new work
            // is not held by it, and SKIP LOCKED keeps the two apart (commit-to-stream
            // latency is about one cycle shorter at steady rates).
            self.start_cycle(ctx);
        }
    }

    fn start_cycle(&mut self, ctx: &mut Context<Self>) {
        self.in_flight += 1;
        let deps = self.deps.clone();
        let cycle = async move { run_once(&deps).await }
            .into_actor(self)
            .map(|result, act, ctx| act.after_cycle(result, ctx));
        ctx.spawn(cycle);
    }

    fn after_cycle(&mut self, result: Result<CycleReport, CycleError>, ctx: &mut Context<Self>) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let mut backlog = false;
        let mut progressed = false;
        match result {
            Ok(report) => {
                if self.outage_streak > 0 {
                    crate::telemetry::outage_over(self.outage_streak);
                }
                self.outage_streak = 0;
                self.health.set_relay_ok(true);
                crate::telemetry::cycle_done(&report);
                backlog = report.full;
                progressed = report.claimed > 0;
                if report.no_slot {
                    self.slots_full_until = Some(Instant::now() + SLOTS_FULL_FOR);
                }
                if self.quiet.record(report.max_seq, Instant::now()) {
                    self.announce(ctx);
                }
            }
            Err(error) => {
                self.outage_streak = self.outage_streak.saturating_add(1);
                self.health.set_relay_ok(false);
                crate::telemetry::cycle_failed(&error, self.outage_streak);
                let pause = backoff::outage_pause(self.outage_streak, rand::rng().random());
                self.backing_off = true;
                self.wake_pending = true;
                ctx.run_later(pause, |act, ctx| {
                    act.backing_off = false;
                    act.wake_pending = false;
                    act.wake(ctx);
                });
            }
        }
        if self.draining {
            if self.in_flight == 0 {
                for done in self.drained.drain(..) {
                    let _ = done.send(());
                }
            }
            return;
        }
        if self.backing_off {
            return;
        }
        if backlog {
            // A full batch means a backlog: run every worker until batches come back short.
            while self.in_flight < self.concurrency() {
                self.start_cycle(ctx);
            }
        } else if progressed || self.wake_pending {
            // It found work (or was woken meanwhile): more may be waiting behind what it
            // held, such as the next events of its keys. Look again until a cycle finds none,
            // one follow-up at a time: without a full batch there is no backlog to share,
            // and a second claimer behind a hot key would only rescan what the first holds.
            // While another cycle runs, the follow-up waits for it (it may hold those keys).
            if self.in_flight == 0 {
                self.wake_pending = false;
                self.start_cycle(ctx);
            } else {
                self.wake_pending = true;
            }
        }
    }
}

impl Actor for Claimer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.poll_interval, |act, ctx| act.wake(ctx));
        self.wake(ctx);
    }
}

impl Supervised for Claimer {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::warn!("claimer restarting");
        self.in_flight = 0;
        self.backing_off = false;
        self.announcing = false;
        self.fast_polling = false;
    }
}

impl Handler<Wake> for Claimer {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        self.wake(ctx);
    }
}

impl Handler<Drain> for Claimer {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, _: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        if self.in_flight == 0 {
            return Box::pin(async {});
        }
        let (tx, rx) = oneshot::channel();
        self.drained.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
