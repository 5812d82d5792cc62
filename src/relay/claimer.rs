//! The claimer actor: schedules claim cycles and routes their results.
//!
//! It runs one cycle at a time, woken by NOTIFY (through the listener), by its poll timer,
//! and by the retry scheduler. A full batch means more is waiting: it loops at once. An
//! outage backs off with jitter and marks the relay not-ready until a cycle succeeds again.
//! It never panics and never stops on an error: a failed cycle is logged, counted and retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Handler, Recipient, ResponseFuture,
    Supervised, WrapFuture,
};
use tokio::sync::oneshot;

use super::cycle::{run_once, CycleDeps, CycleError, CycleReport};
use super::health::Health;
use super::messages::{Drain, RetryDue, Wake};
use super::quiet::{self, Quiet};
use super::supervision::{catching, Panicked};
use super::throughput::Throughput;
use crate::telemetry::ActorName;
use failing::FailureLog;
use outbox_core::backoff;

mod failing;

/// What the claimer is doing, as far as starting cycles goes.
#[derive(Debug)]
enum Mode {
    /// Cycles start on wakes; `again` asks for one more look once the running cycles end (a
    /// wake came while they ran, and they may have scanned before its work committed).
    Running { again: bool },
    /// After an outage: no cycle starts until the pause ends.
    BackingOff,
    /// Shutting down: no cycle starts; these wait for the running ones to end.
    Draining(Vec<oneshot::Sender<()>>),
}

/// Whether producers are asked not to NOTIFY (see `quiet`): whether the fast-poll loop runs,
/// and whether an announcement is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Producers {
    /// They notify; the claimer waits for wakes.
    Notifying,
    /// An announcement is being written; the fast-poll loop starts when it lands.
    Announcing,
    /// They are quiet; the fast-poll loop runs.
    Quiet,
    /// Quiet, and a renewal is being written.
    Renewing,
}

/// Claims and publishes batches.
pub struct Claimer {
    deps: CycleDeps,
    health: Arc<Health>,
    throughput: Arc<Throughput>,
    retry: Recipient<RetryDue>,
    poll_interval: Duration,
    workers: usize,
    in_flight: usize,
    mode: Mode,
    producers: Producers,
    outage_streak: u32,
    /// Whether the current outage was logged, so its end is logged too (and only then).
    outage_logged: bool,
    quiet: Quiet,
    slots_full_until: Option<Instant>,
    /// Events whose failure was logged, so their retries do not log it again.
    failing: FailureLog,
}

/// How long a replica whose cycle found every claim slot held runs one cycle at a time.
const SLOTS_FULL_FOR: Duration = Duration::from_secs(1);

/// What the claimer is given at start.
pub struct ClaimerConfig {
    /// `relay.poll_interval`: it looks for work at least this often.
    pub poll_interval: Duration,
    /// `relay.workers`: claim transactions it runs at once while there is a backlog (they
    /// skip each other's locked rows like separate replicas do).
    pub workers: usize,
    /// `relay.quiet_above`: producers' NOTIFY is quieted while events arrive faster.
    pub quiet_above: u32,
}

impl Claimer {
    /// A claimer running cycles with `deps`, reporting to `health` and `throughput`, and
    /// telling `retry` when retries it scheduled come due.
    pub fn new(
        deps: CycleDeps,
        health: Arc<Health>,
        throughput: Arc<Throughput>,
        retry: Recipient<RetryDue>,
        config: ClaimerConfig,
    ) -> Self {
        let failing = FailureLog::new(deps.retry.max);
        Claimer {
            failing,
            deps,
            health,
            throughput,
            retry,
            poll_interval: config.poll_interval,
            workers: config.workers.max(1),
            in_flight: 0,
            mode: Mode::Running { again: false },
            producers: Producers::Notifying,
            outage_streak: 0,
            outage_logged: false,
            quiet: Quiet::new(config.quiet_above, Instant::now()),
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
        self.producers = match self.producers {
            Producers::Notifying => Producers::Announcing,
            Producers::Quiet => Producers::Renewing,
            Producers::Announcing | Producers::Renewing => return,
        };
        let db = self.deps.db.clone();
        let write = async move {
            db.unit(async |c| crate::db::wake::announce_busy(c, quiet::QUIET_FOR).await)
                .await
        }
        .into_actor(self)
        .map(|result, act, ctx| {
            let was_quiet = act.producers == Producers::Renewing;
            match result {
                Ok(()) => {
                    act.quiet.announced(Instant::now());
                    act.producers = Producers::Quiet;
                    if !was_quiet {
                        crate::telemetry::producers_quiet(true);
                        act.fast_poll(ctx);
                    }
                }
                // Producers keep notifying: nothing is late, only their commits are slower.
                Err(error) => {
                    tracing::debug!("could not quiet producers: {error}");
                    act.producers = if was_quiet {
                        Producers::Quiet
                    } else {
                        Producers::Notifying
                    };
                }
            }
        });
        ctx.spawn(write);
    }

    /// While producers may not notify, look for work every `FAST_POLL`.
    fn fast_poll(&mut self, ctx: &mut Context<Self>) {
        if !self.quiet.polling_fast(Instant::now()) {
            self.producers = match self.producers {
                // A renewal in flight starts the loop again when it lands.
                Producers::Renewing | Producers::Announcing => Producers::Announcing,
                Producers::Quiet | Producers::Notifying => Producers::Notifying,
            };
            crate::telemetry::producers_quiet(false);
            return;
        }
        // Only when idle: a running cycle that finds work starts the next one itself, and a
        // second cycle started beside it would only compete for the same keys.
        if self.in_flight == 0 {
            self.wake(ctx);
        }
        ctx.run_later(quiet::FAST_POLL, |act, ctx| act.fast_poll(ctx));
    }

    /// Something may be waiting (a notification, the poll timer, a retry coming due).
    fn wake(&mut self, ctx: &mut Context<Self>) {
        let Mode::Running { again } = &mut self.mode else {
            // Backing off: the pause's end looks again. Draining: nothing more starts.
            return;
        };
        if self.in_flight > 0 {
            // The running cycle may have scanned before this work committed, or it holds
            // the key head the new work queues behind: look again when it ends.
            *again = true;
        }
        if self.in_flight < self.concurrency() {
            // Start now rather than after the running cycle's publish and commit: new work
            // is not held by it, and SKIP LOCKED keeps the two apart.
            self.start_cycle(ctx);
        }
    }

    fn start_cycle(&mut self, ctx: &mut Context<Self>) {
        self.in_flight += 1;
        let deps = self.deps.clone();
        let cycle = async move { catching(ActorName::Claimer, run_once(&deps)).await }
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok(result) => act.after_cycle(result, ctx),
                // Its supervisor restarts it with fresh state; the transaction was dropped
                // with the cycle, so its row locks are released.
                Err(Panicked) => ctx.stop(),
            });
        ctx.spawn(cycle);
    }

    fn after_cycle(&mut self, result: Result<CycleReport, CycleError>, ctx: &mut Context<Self>) {
        super::faults::panic_at("claimer-panic");
        self.in_flight = self.in_flight.saturating_sub(1);
        self.health.cycle_ended(result.is_ok());
        let mut backlog = false;
        let mut progressed = false;
        match result {
            Ok(report) => {
                self.cycle_committed(&report, ctx);
                backlog = report.full;
                progressed = report.claimed > 0;
            }
            Err(error) => {
                self.outage_streak = self.outage_streak.saturating_add(1);
                self.outage_logged |=
                    crate::telemetry::cycle_failed(&error, self.outage_streak, error.is_standbys());
                if matches!(self.mode, Mode::Running { .. }) {
                    self.mode = Mode::BackingOff;
                    let pause = backoff::outage_pause(self.outage_streak, backoff::unit());
                    ctx.run_later(pause, |act, ctx| {
                        if matches!(act.mode, Mode::BackingOff) {
                            act.mode = Mode::Running { again: false };
                            act.wake(ctx);
                        }
                    });
                }
            }
        }
        let again = match &mut self.mode {
            Mode::Draining(waiters) => {
                if self.in_flight == 0 {
                    for done in waiters.drain(..) {
                        let _ = done.send(());
                    }
                }
                return;
            }
            Mode::BackingOff => return,
            Mode::Running { again } => again,
        };
        if backlog {
            // A full batch means a backlog: run every worker until batches come back short.
            while self.in_flight < self.concurrency() {
                self.start_cycle(ctx);
            }
        } else if progressed || *again {
            // It found work (or was woken meanwhile): more may be waiting behind what it
            // held, such as the next events of its keys. Look again until a cycle finds none,
            // one follow-up at a time: without a full batch there is no backlog to share,
            // and a second claimer behind a hot key would only rescan what the first holds.
            // While another cycle runs, the follow-up waits for it (it may hold those keys).
            if self.in_flight == 0 {
                *again = false;
                self.start_cycle(ctx);
            } else {
                *again = true;
            }
        }
    }

    /// Reports a committed cycle: telemetry, throughput, retries due, quieting producers.
    fn cycle_committed(&mut self, report: &CycleReport, ctx: &mut Context<Self>) {
        if self.outage_logged {
            crate::telemetry::outage_over(self.outage_streak);
        }
        self.outage_streak = 0;
        self.outage_logged = false;
        crate::telemetry::cycle_done(&crate::telemetry::CycleFigures {
            claimed: report.claimed,
            elapsed: report.elapsed,
            published: &report.published,
            latencies: &report.latencies,
            duplicates: report.duplicates,
            failed: report.failures.len(),
            deferred: report.deferred,
        });
        for failure in &report.failures {
            if failure.dead {
                self.failing.dead(&failure.id);
                crate::telemetry::event_dead(&failure.id, &failure.error);
                continue;
            }
            let delay = Duration::from_millis(u64::try_from(failure.delay_ms).unwrap_or(0));
            if self.failing.failed(failure.id, Instant::now()) {
                crate::telemetry::event_failed(&failure.id, &failure.error, delay);
            } else {
                crate::telemetry::event_failed_again(&failure.id, &failure.error, delay);
            }
        }
        self.throughput
            .record(report.published_total(), report.failures.len() as u64);
        if let Some(after) = report.next_retry() {
            self.retry.do_send(RetryDue {
                after,
                wake: ctx.address().recipient(),
            });
        }
        if report.no_slot {
            self.slots_full_until = Some(Instant::now() + SLOTS_FULL_FOR);
        }
        if self.quiet.record(report.max_seq, Instant::now()) {
            self.announce(ctx);
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
        crate::telemetry::actor_restarting(ActorName::Claimer);
        self.in_flight = 0;
        if !matches!(self.mode, Mode::Draining(_)) {
            self.mode = Mode::Running { again: false };
        }
        if self.producers != Producers::Notifying {
            crate::telemetry::producers_quiet(false);
        }
        self.producers = Producers::Notifying;
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
        let mut waiters = match std::mem::replace(&mut self.mode, Mode::Draining(Vec::new())) {
            Mode::Draining(waiters) => waiters,
            Mode::Running { .. } | Mode::BackingOff => Vec::new(),
        };
        let answer = if self.in_flight == 0 {
            None
        } else {
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            Some(rx)
        };
        self.mode = Mode::Draining(waiters);
        Box::pin(async move {
            if let Some(rx) = answer {
                let _ = rx.await;
            }
        })
    }
}
