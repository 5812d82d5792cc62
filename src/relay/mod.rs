//! The relay: supervised actors that move events from the outbox table to Redis Streams.
//!
//! ```text
//!  NOTIFY ──► listener ──Wake──► claimer ──Publish──► dispatcher (one per topic) ──► Redis
//!  timer  ───────────────Wake──►    │  ◄──outcomes──┘
//!  retry scheduler ─────Wake──►     └──PlanRetries──► retry scheduler
//!  cleaner, heartbeat, backlog sampler: periodic jobs on their own timers
//! ```
//! Every actor runs under an actix `Supervisor`: one that stops is restarted on its own,
//! without touching the others or the process.

pub mod backoff;
pub mod claimer;
pub mod cleaner;
pub mod cycle;
pub mod dispatcher;
pub mod health;
pub mod heartbeat;
pub mod listener;
pub mod messages;
pub mod ordering;
pub mod overlap;
pub mod periodic;
pub mod quiet;
pub mod retry;
pub mod sizing;
pub mod slots;
pub mod stats;
pub mod throughput;

use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Supervisor};
use chrono::Utc;

use crate::config::Settings;
use crate::db::pool::SessionLimits;
use crate::db::Pool;
use crate::publish::Publisher;
use claimer::Claimer;
use cleaner::Cleaner;
use cycle::CycleDeps;
use dispatcher::Dispatchers;
use health::Health;
use heartbeat::Heartbeat;
use listener::Listener;
use periodic::Periodic;
use retry::RetryScheduler;
use stats::BacklogSampler;

/// What the running relay hands back, to stop it.
pub struct RelayHandle {
    claimer: Addr<Claimer>,
    heartbeat: Heartbeat,
}

/// Starts every actor. Must be called inside the actix system.
pub fn start(
    settings: &Settings,
    database_url: &str,
    pool: Pool,
    publisher: Publisher,
    health: Arc<Health>,
) -> RelayHandle {
    let dispatchers = Dispatchers::new(publisher);
    let retry_settings = settings.retry.clone();
    let limits = crate::db::outbox::BatchLimits {
        rows: i64::from(settings.relay.batch_size),
        bytes: settings.relay.batch_bytes as i64,
    };
    let delete_on_publish = settings.delete_on_publish();
    let poll_interval = settings.relay.poll_interval;
    let workers = settings.relay.workers as usize;
    let overlap_mark = settings.relay.overlap_mark;
    let quiet_above = settings.relay.quiet_above;
    let cluster_claims = settings.relay.cluster_claims as i32;
    let claimer_pool = pool.clone();
    let claimer = Supervisor::start(move |ctx: &mut actix::Context<Claimer>| {
        let me = actix::AsyncContext::address(ctx).recipient();
        let retry = Supervisor::start(move |_| RetryScheduler::new(retry_settings, me));
        let deps = CycleDeps {
            pool: claimer_pool,
            dispatchers,
            retry,
            limits,
            size_hint: sizing::SizeHint::default(),
            delete_on_publish,
            overlap: overlap::Overlap::new(overlap_mark),
            slots: slots::SlotGate::new(cluster_claims),
        };
        Claimer::new(deps, health, poll_interval, workers, quiet_above)
    });
    if !settings.relay.poll_only {
        let limits = SessionLimits {
            lease: settings.relay.lease,
        };
        let url = database_url.to_string();
        let wake = claimer.clone().recipient();
        Supervisor::start(move |_| Listener::new(url, limits, wake));
    }
    let cleaner = Cleaner {
        pool: pool.clone(),
        published_for: settings.retention.published_for,
        interval: settings.retention.interval,
        batch_size: settings.retention.batch_size,
    };
    Supervisor::start(move |_| Periodic::new(cleaner));
    let heartbeat = Heartbeat {
        pool: pool.clone(),
        instance_id: settings.instance_id(),
        started_at: Utc::now(),
        interval: settings.relay.heartbeat_interval,
        leaving: Arc::default(),
    };
    let beat = heartbeat.clone();
    Supervisor::start(move |_| Periodic::new(beat));
    let sampler = BacklogSampler {
        pool,
        interval: Duration::from_secs(5),
    };
    Supervisor::start(move |_| Periodic::new(sampler));
    RelayHandle { claimer, heartbeat }
}

impl RelayHandle {
    /// Wakes the claimer: for the admin server, after a retry or a resume.
    pub fn waker(&self) -> actix::Recipient<messages::Wake> {
        self.claimer.clone().recipient()
    }

    /// Stops claiming and waits (at most `deadline`) for the batch in hand to commit or roll
    /// back, then removes this replica's heartbeat.
    pub async fn shutdown(self, deadline: Duration) {
        let drained = tokio::time::timeout(deadline, self.claimer.send(messages::Drain)).await;
        if drained.is_err() {
            tracing::warn!("claim batch did not finish within {deadline:?}; its locks are released when the process exits");
        }
        if let Err(e) = tokio::time::timeout(Duration::from_secs(2), self.heartbeat.leave()).await {
            tracing::warn!("could not remove heartbeat: {e}");
        }
    }
}
