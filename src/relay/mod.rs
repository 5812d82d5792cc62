//! The relay: supervised actors that move events from the outbox table to Redis Streams.
//!
//! ```text
//!  NOTIFY ──► listener ──Wake──► claimer ──Publish──► dispatcher (one per topic) ──► Redis
//!  timer  ───────────────Wake──►    │  ◄──outcomes──┘
//!  retry scheduler ◄──RetryDue──────┘  (──Wake──► claimer when a retry comes due)
//!  readiness ──reports──► publish gate ◄──reads── claim cycle
//!  retention cleaner, heartbeat, backlog sampler, group keeper, readiness, marks keeper,
//!  topic registrar, dedup sweeper: periodic jobs (`periodic`)
//! ```
//! Every actor runs under an actix `Supervisor` and is watched: one that stops, or panics in
//! its work, is restarted on its own, without touching the others or the process; one that
//! dies for good ends the process (see `supervision`). Dispatchers start with their topic
//! (`topics::Topics`). A cycle is `cycle::run_once`: read the gate (`gate`), claim, group
//! and settle (`batch`), publish (the dispatchers), repair lost entries (`repair`), apply the
//! retry policy (`retry`), commit.

pub mod batch;
pub mod claimer;
pub mod cleaner;
pub mod cycle;
pub mod dispatcher;
pub mod faults;
pub mod gate;
pub mod groups;
pub mod health;
pub mod heartbeat;
pub mod listener;
pub mod marks;
pub mod messages;
pub mod overlap;
pub mod periodic;
pub mod quiet;
pub mod readiness;
pub mod registrar;
pub mod repair;
pub mod retry;
pub mod sizing;
pub mod slots;
pub mod stats;
pub mod supervision;
pub mod sweeper;
pub mod throughput;
pub mod topics;

use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, Supervisor};
use chrono::Utc;

use crate::config::Settings;
use crate::db::Db;
use crate::publish::Publisher;
use crate::telemetry::ActorName;
use claimer::{Claimer, ClaimerConfig};
use cleaner::Cleaner;
use cycle::CycleDeps;
use gate::PublishGate;
use health::Health;
use heartbeat::Heartbeat;
use listener::Listener;
use periodic::Periodic;
use readiness::ReadinessCheck;
use retry::RetryScheduler;
use stats::BacklogSampler;
use supervision::Watched;
use throughput::Throughput;
use topics::Topics;

/// How often the consumer groups' gauges are sampled.
const GROUP_SAMPLES: Duration = Duration::from_secs(5);

/// What the running relay hands back, to watch and stop it.
pub struct RelayHandle {
    claimer: Addr<Claimer>,
    heartbeat: Heartbeat,
    watched: Watched,
}

/// What the relay's actors work with.
pub struct Wiring<'a> {
    /// The settings in force.
    pub settings: &'a Settings,
    /// For the listener's dedicated connection.
    pub database_url: &'a str,
    /// The claim cycles' and periodic jobs' pool.
    pub db: Db,
    /// The admin server's pool, which the readiness check pings: the relay's may be busy with
    /// claims.
    pub admin_db: Db,
    /// The Redis publisher.
    pub publisher: Publisher,
    /// Where readiness, liveness and the backlog go.
    pub health: Arc<Health>,
}

/// Starts every actor, each under a supervisor and watched (see `supervision`). Must be
/// called inside the actix system.
pub fn start(wiring: Wiring<'_>) -> RelayHandle {
    let watched = Watched::default();
    let throughput = Arc::new(Throughput::new());
    let settings = wiring.settings;
    let topics = Topics::new(
        wiring.publisher.clone(),
        &settings.groups,
        settings.configured_partitions(),
        watched.clone(),
    );
    let gate = PublishGate::new(settings.redis.wait_fsync);
    let registered = registrar::Registered::default();
    let claimer = start_claiming(
        &wiring,
        (&topics, &registered),
        &gate,
        throughput.clone(),
        &watched,
    );
    let heartbeat = Heartbeat {
        db: wiring.db.clone(),
        instance_id: wiring.settings.instance_id(),
        started_at: Utc::now(),
        interval: wiring.settings.relay.heartbeat_interval,
        leaving: Arc::default(),
        throughput,
    };
    start_periodic(
        &wiring,
        (&topics, registered),
        &gate,
        heartbeat.clone(),
        &watched,
    );
    RelayHandle {
        claimer,
        heartbeat,
        watched,
    }
}

/// The claim path: the dispatchers of configured topics, the retry scheduler, the claimer
/// and (unless polling only) the listener that wakes it.
fn start_claiming(
    wiring: &Wiring<'_>,
    (topics, registered): (&Topics, &registrar::Registered),
    gate: &PublishGate,
    throughput: Arc<Throughput>,
    watched: &Watched,
) -> Addr<Claimer> {
    let settings = wiring.settings;
    let deps = CycleDeps {
        db: wiring.db.clone(),
        topics: topics.clone(),
        registered: registered.clone(),
        gate: gate.clone(),
        repair: repair::RepairSettings {
            kept_for: settings.retention.published_for,
            lease: settings.relay.lease,
        },
        retry: settings.retry.clone(),
        limits: crate::db::outbox::BatchLimits {
            rows: i64::from(settings.relay.batch_size),
            bytes: i64::try_from(settings.relay.batch_bytes).unwrap_or(i64::MAX),
        },
        size_hint: sizing::SizeHint::default(),
        delete_on_publish: settings.delete_on_publish(),
        overlap: overlap::Overlap::new(settings.relay.overlap_mark),
        slots: slots::SlotGate::new(settings.relay.cluster_claims as i32),
        standbys: (
            settings.database.wait_standbys,
            settings.database.wait_standbys_timeout,
        ),
    };
    topics.start_configured();
    let config = ClaimerConfig {
        poll_interval: settings.relay.poll_interval,
        workers: settings.relay.workers as usize,
        quiet_above: settings.relay.quiet_above,
    };
    let retry = Supervisor::start(|_| RetryScheduler::default());
    watched.add(ActorName::RetryScheduler, &retry);
    let health = wiring.health.clone();
    let claimer = Supervisor::start(move |_| {
        Claimer::new(deps, health, throughput, retry.recipient(), config)
    });
    watched.add(ActorName::Claimer, &claimer);
    if !settings.poll_only() {
        let session = wiring.db.session();
        let log = wiring.db.connect_log().clone();
        let url = wiring.database_url.to_string();
        let wake = claimer.clone().recipient();
        let listener = Supervisor::start(move |_| Listener::new(url, session, log, wake));
        watched.add(ActorName::Listener, &listener);
    }
    claimer
}

/// The periodic jobs: retention, heartbeat, the group keeper (with declared groups), the
/// backlog sampler, the marks keeper, the readiness check, the topic registrar and the dedup
/// sweeper.
fn start_periodic(
    wiring: &Wiring<'_>,
    (topics, registered): (&Topics, registrar::Registered),
    gate: &PublishGate,
    heartbeat: Heartbeat,
    watched: &Watched,
) {
    fn periodic<J: periodic::Job>(job: J, watched: &Watched) {
        watched.add(J::ACTOR, &Supervisor::start(move |_| Periodic::new(job)));
    }
    let settings = wiring.settings;
    periodic(
        Cleaner {
            db: wiring.db.clone(),
            published_for: settings.retention.published_for,
            interval: settings.retention.interval,
            batch_size: settings.retention.batch_size,
        },
        watched,
    );
    periodic(heartbeat, watched);
    if !settings.groups.is_empty() {
        let trim_every = settings
            .redis
            .trim_acked
            .then_some(settings.retention.interval);
        let sample_every = trim_every.map_or(GROUP_SAMPLES, |t| t.min(GROUP_SAMPLES));
        let keeper = groups::GroupKeeper::new(
            wiring.publisher.clone(),
            &settings.groups,
            sample_every,
            trim_every,
        );
        periodic(keeper, watched);
    }
    periodic(
        BacklogSampler {
            db: wiring.db.clone(),
            interval: Duration::from_secs(5),
            health: wiring.health.clone(),
        },
        watched,
    );
    periodic(
        marks::MarksKeeper {
            db: wiring.db.clone(),
            publisher: wiring.publisher.clone(),
        },
        watched,
    );
    periodic(
        ReadinessCheck {
            db: wiring.admin_db.clone(),
            publisher: wiring.publisher.clone(),
            health: wiring.health.clone(),
            gate: gate.clone(),
            max_memory_ratio: settings.redis.max_memory_ratio,
            wait_standbys: settings.database.wait_standbys,
        },
        watched,
    );
    periodic(
        registrar::TopicRegistrar::new(wiring.db.clone(), topics.clone(), registered),
        watched,
    );
    periodic(
        sweeper::DedupSweeper {
            topics: topics.clone(),
        },
        watched,
    );
}

impl RelayHandle {
    /// Wakes the claimer: for the admin server, after a retry or a resume.
    pub fn waker(&self) -> actix::Recipient<messages::Wake> {
        self.claimer.clone().recipient()
    }

    /// Resolves with the name of the first actor found gone for good (see `supervision`).
    pub async fn lost(&self) -> ActorName {
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

#[cfg(test)]
mod tests {
    use super::periodic::Job;
    use super::*;

    /// `outbox_job_failures_total` has a series for each job from the first scrape.
    #[test]
    fn every_job_counts_its_failures_from_the_first_scrape() {
        for actor in [
            Cleaner::ACTOR,
            Heartbeat::ACTOR,
            stats::BacklogSampler::ACTOR,
            groups::GroupKeeper::ACTOR,
            readiness::ReadinessCheck::ACTOR,
            marks::MarksKeeper::ACTOR,
            registrar::TopicRegistrar::ACTOR,
            sweeper::DedupSweeper::ACTOR,
            ActorName::Listener,
        ] {
            assert!(
                crate::telemetry::JOBS.contains(&actor),
                "{} has no failure series at start",
                actor.as_str()
            );
        }
    }
}
