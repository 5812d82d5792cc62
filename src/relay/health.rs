//! Shared health state, written by the relay and a background check, read by `/healthz` and
//! `/readyz` without waiting on anything: a probe must answer at once, outage or not.
//!
//! Readiness: Postgres and Redis answered the last background check (see
//! `relay::readiness`), that check is recent, the last claim cycle succeeded, and the process is
//! not stopping. Liveness: the claim loop ends a cycle every so often (it polls on a timer even
//! when idle), so a loop silent for `relay.stall_after` while events are pending is stuck, and
//! so is a process one of whose actors is gone.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::telemetry::ActorName;

/// A background check older than this no longer counts: the checker itself is stuck.
const CHECK_FRESH_FOR: Duration = Duration::from_secs(5);

/// Flags read by the probes.
#[derive(Debug)]
pub struct Health {
    origin: Instant,
    relay_ok: AtomicBool,
    stopping: AtomicBool,
    postgres_ok: AtomicBool,
    redis_ok: AtomicBool,
    durability_ok: AtomicBool,
    memory_ok: AtomicBool,
    /// Milliseconds since `origin` of the last background check; 0: none yet.
    checked_at_ms: AtomicU64,
    /// Milliseconds since `origin` at which the last claim cycle ended.
    cycle_ended_ms: AtomicU64,
    /// Events pending at the last backlog sample; -1: not sampled yet.
    pending: AtomicI64,
    /// The first actor found gone for good.
    lost: Mutex<Option<ActorName>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            origin: Instant::now(),
            relay_ok: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
            postgres_ok: AtomicBool::new(false),
            redis_ok: AtomicBool::new(false),
            durability_ok: AtomicBool::new(true),
            memory_ok: AtomicBool::new(true),
            checked_at_ms: AtomicU64::new(0),
            cycle_ended_ms: AtomicU64::new(0),
            pending: AtomicI64::new(-1),
            lost: Mutex::new(None),
        }
    }
}

/// What `/readyz` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Readiness {
    /// Postgres answered the last check.
    pub postgres: bool,
    /// Redis answered the last check.
    pub redis: bool,
    /// Redis can confirm writes as `redis.wait_fsync` asks (false: the log says why).
    pub durability: bool,
    /// Redis is below `redis.max_memory_ratio` of its `maxmemory` (false: publishing holds).
    pub memory: bool,
    /// The last claim cycle succeeded.
    pub relay: bool,
    /// Shutdown has begun.
    pub stopping: bool,
    /// The last check is recent enough to go by.
    pub fresh: bool,
}

impl Readiness {
    /// Ready to take traffic.
    pub fn ready(&self) -> bool {
        self.postgres
            && self.redis
            && self.durability
            && self.memory
            && self.relay
            && self.fresh
            && !self.stopping
    }
}

/// What `/healthz` reports when the process should be restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unhealthy {
    /// No claim cycle ended for this long while events were pending.
    Stalled {
        /// Since the last cycle ended.
        silent_for: Duration,
        /// Events pending at the last sample.
        pending: i64,
    },
    /// An actor is gone and nothing restarts it.
    ActorLost(ActorName),
}

impl Health {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The last claim cycle succeeded (true) or hit an outage (false); either way it ended.
    pub fn cycle_ended(&self, ok: bool) {
        self.relay_ok.store(ok, Ordering::Relaxed);
        self.cycle_ended_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The result of a background check of both servers.
    pub fn checked(&self, postgres: bool, redis: bool) {
        self.postgres_ok.store(postgres, Ordering::Relaxed);
        self.redis_ok.store(redis, Ordering::Relaxed);
        self.checked_at_ms
            .store(self.now_ms().max(1), Ordering::Relaxed);
    }

    /// Whether Redis can confirm writes as the settings ask.
    pub fn set_durability(&self, ok: bool) {
        self.durability_ok.store(ok, Ordering::Relaxed);
    }

    /// Whether Redis has room below `redis.max_memory_ratio`.
    pub fn set_memory(&self, ok: bool) {
        self.memory_ok.store(ok, Ordering::Relaxed);
    }

    /// A fresh count of pending events.
    pub fn set_pending(&self, pending: i64) {
        self.pending.store(pending, Ordering::Relaxed);
    }

    /// Shutdown has begun: readiness turns off so traffic and probes move elsewhere.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Records an actor that is gone for good (the first one is kept).
    pub fn set_lost(&self, actor: ActorName) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.get_or_insert(actor);
    }

    /// The readiness flags now.
    pub fn readiness(&self) -> Readiness {
        let checked = self.checked_at_ms.load(Ordering::Relaxed);
        let age = Duration::from_millis(self.now_ms().saturating_sub(checked));
        Readiness {
            postgres: self.postgres_ok.load(Ordering::Relaxed),
            redis: self.redis_ok.load(Ordering::Relaxed),
            durability: self.durability_ok.load(Ordering::Relaxed),
            memory: self.memory_ok.load(Ordering::Relaxed),
            relay: self.relay_ok.load(Ordering::Relaxed),
            stopping: self.stopping.load(Ordering::Relaxed),
            fresh: checked > 0 && age <= CHECK_FRESH_FOR,
        }
    }

    /// Why the process should be restarted, if it should.
    pub fn liveness(&self, stall_after: Duration) -> Result<(), Unhealthy> {
        if let Some(actor) = *self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(Unhealthy::ActorLost(actor));
        }
        let silent_for = Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.cycle_ended_ms.load(Ordering::Relaxed)),
        );
        let pending = self.pending.load(Ordering::Relaxed);
        if pending > 0 && silent_for > stall_after {
            return Err(Unhealthy::Stalled {
                silent_for,
                pending,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_loop_is_stalled_only_with_work_pending() {
        let health = Health::default();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(health.liveness(Duration::from_millis(10)), Ok(()));
        health.set_pending(3);
        assert!(matches!(
            health.liveness(Duration::from_millis(10)),
            Err(Unhealthy::Stalled { pending: 3, .. })
        ));
        health.cycle_ended(true);
        assert_eq!(health.liveness(Duration::from_millis(10)), Ok(()));
    }

    #[test]
    fn readiness_needs_a_fresh_check() {
        let health = Health::default();
        assert!(!health.readiness().ready(), "no check yet");
        health.checked(true, true);
        assert!(health.readiness().ready());
        health.checked(true, false);
        assert!(!health.readiness().ready());
        health.checked(true, true);
        health.set_durability(false);
        assert!(!health.readiness().ready(), "Redis cannot confirm as asked");
    }

    #[test]
    fn a_lost_actor_is_unhealthy() {
        let health = Health::default();
        health.set_lost(ActorName::Claimer);
        health.set_lost(ActorName::Retention);
        assert_eq!(
            health.liveness(Duration::from_secs(60)),
            Err(Unhealthy::ActorLost(ActorName::Claimer))
        );
    }
}
