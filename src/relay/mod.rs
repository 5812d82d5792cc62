//! The relay: supervised actors that move events from the outbox table to Redis Streams.
//!
//! ```text
//!  NOTIFY ──► listener ──Wake──► claimer ──Publish──► dispatcher (one per topic) ──► Redis
//!  timer  ───────────────Wake──►    │  ◄──outcomes──┘
//!  retry scheduler ◄──RetryDue──────┘  (──Wake──► claimer when a retry comes due)
//!  cleaner, heartbeat, backlog sampler: periodic jobs on their own timers
//! ```
//! Every actor runs under an actix `Supervisor`: one that stops, or panics in its work, is
//! restarted on its own, without touching the others or the process (see `supervision`).
//! A cycle is `cycle::run_once`: claim (`claim`), group and settle (`settle`, pure), publish
//! (the dispatchers), apply the retry policy (`retry`), commit.

pub mod claim;
pub mod claimer;
pub mod cleaner;
pub mod cycle;
pub mod dispatcher;
pub mod faults;
pub mod groups;
pub mod health;
pub mod heartbeat;
pub mod listener;
pub mod messages;
pub mod ordering;
pub mod overlap;
pub mod periodic;
pub mod quiet;
pub mod retry;
pub mod settle;
pub mod sizing;
pub mod slots;
pub mod stats;
pub mod supervision;
pub mod throughput;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Addr, Supervisor};
use chrono::Utc;

use crate::config::Settings;
use crate::db::Db;
use crate::publish::Publisher;
use claimer::{Claimer, ClaimerConfig};
use cleaner::Cleaner;
use cycle::CycleDeps;
use dispatcher::Dispatchers;
use health::Health;
use heartbeat::Heartbeat;
use listener::Listener;
use periodic::Periodic;
use retry::RetryScheduler;
use stats::BacklogSampler;
use supervision::Watched;
use throughput::Throughput;

/// How often the consumer groups' gauges are sampled.
const GROUP_SAMPLES: Duration = Duration::from_secs(5);

/// What the running relay hands back, to watch and stop it.
pub struct RelayHandle {
    claimer: Addr<Claimer>,
    heartbeat: Heartbeat,
    watched: Watched,
}

/// Starts every actor. Must be called inside the actix system.
pub fn start(
    settings: &Settings,
    database_url: &str,
    db: Db,
    publisher: Publisher,
    health: Arc<Health>,
) -> RelayHandle {
    let mut watched = Watched::default();
    let throughput = Arc::new(Throughput::new());
    let deps = CycleDeps {
        db: db.clone(),
        dispatchers: Dispatchers::new(publisher.clone(), db.clone(), &settings.groups),
        retry: settings.retry.clone(),
        limits: crate::db::outbox::BatchLimits {
            rows: i64::from(settings.relay.batch_size),
            bytes: i64::try_from(settings.relay.batch_bytes).unwrap_or(i64::MAX),
        },
        size_hint: sizing::SizeHint::default(),
        delete_on_publish: settings.delete_on_publish(),
        overlap: overlap::Overlap::new(settings.relay.overlap_mark),
        slots: slots::SlotGate::new(settings.relay.cluster_claims as i32),
    };
    deps.dispatchers.start_grouped();
    let config = ClaimerConfig {
        poll_interval: settings.relay.poll_interval,
        workers: settings.relay.workers as usize,
        quiet_above: settings.relay.quiet_above,
    };
    // The scheduler wakes the claimer and the claimer tells the scheduler: the claimer's
    // address exists once its context does, so the scheduler starts inside its factory.
    let retry_addr: Arc<Mutex<Option<Addr<RetryScheduler>>>> = Arc::default();
    let retry_slot = retry_addr.clone();
    let cycle_health = health.clone();
    let claim_throughput = throughput.clone();
    let claimer = Supervisor::start(move |ctx: &mut actix::Context<Claimer>| {
        let me = actix::AsyncContext::address(ctx).recipient();
        let retry = Supervisor::start(move |_| RetryScheduler::new(me));
        let recipient = retry.clone().recipient();
        if let Ok(mut slot) = retry_slot.lock() {
            *slot = Some(retry);
        }
        Claimer::new(deps, cycle_health, claim_throughput, recipient, config)
    });
    watched.add("claimer", &claimer);
    if let Some(retry) = retry_addr.lock().ok().and_then(|mut slot| slot.take()) {
        watched.add("retry scheduler", &retry);
    }
    if !settings.poll_only() {
        let session = settings.session();
        let url = database_url.to_string();
        let wake = claimer.clone().recipient();
        let listener = Supervisor::start(move |_| Listener::new(url, session, wake));
        watched.add("listener", &listener);
    }
    let cleaner = Cleaner {
        db: db.clone(),
        published_for: settings.retention.published_for,
        interval: settings.retention.interval,
        batch_size: settings.retention.batch_size,
    };
    watched.add(
        "cleaner",
        &Supervisor::start(move |_| Periodic::new(cleaner)),
    );
    let heartbeat = Heartbeat {
        db: db.clone(),
        instance_id: settings.instance_id(),
        started_at: Utc::now(),
        interval: settings.relay.heartbeat_interval,
        leaving: Arc::default(),
        throughput,
    };
    let beat = heartbeat.clone();
    watched.add(
        "heartbeat",
        &Supervisor::start(move |_| Periodic::new(beat)),
    );
    if !settings.groups.is_empty() {
        let trim_every = settings
            .redis
            .trim_acked
            .then_some(settings.retention.interval);
        let sample_every = trim_every.map_or(GROUP_SAMPLES, |t| t.min(GROUP_SAMPLES));
        let keeper =
            groups::GroupKeeper::new(publisher, &settings.groups, sample_every, trim_every);
        watched.add(
            "group keeper",
            &Supervisor::start(move |_| Periodic::new(keeper)),
        );
    }
    let sampler = BacklogSampler {
        db,
        interval: Duration::from_secs(5),
        health,
    };
    watched.add(
        "backlog sampler",
        &Supervisor::start(move |_| Periodic::new(sampler)),
    );
    RelayHandle {
        claimer,
        heartbeat,
        watched,
    }
}

impl RelayHandle {
    /// Wakes the claimer: for the admin server, after a retry or a resume.
    pub fn waker(&self) -> actix::Recipient<messages::Wake> {
        self.claimer.clone().recipient()
    }

    /// Resolves with the name of the first actor found gone for good (see `supervision`).
    pub async fn lost(&self) -> &'static str {
        self.watched.first_lost(Duration::from_secs(1)).await
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
