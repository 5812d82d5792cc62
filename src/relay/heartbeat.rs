//! Heartbeats: each replica upserts its row in `outbox_replicas` so the admin can list the
//! replicas alive now, with this replica's throughput (the claimer's counts); rows silent
//! for ten intervals are pruned by whoever beats next.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;

use super::periodic::Job;
use super::throughput::Throughput;
use crate::db::{replicas, Db, DbError};
use crate::telemetry::ActorName;

/// This replica's identity and pool.
#[derive(Clone)]
pub struct Heartbeat {
    /// The shared pool.
    pub db: Db,
    /// `instance_id`.
    pub instance_id: String,
    /// When this process started.
    pub started_at: DateTime<Utc>,
    /// `relay.heartbeat_interval`.
    pub interval: Duration,
    /// Set at shutdown, so a late tick does not write the row back after `leave`.
    pub leaving: Arc<AtomicBool>,
    /// This replica's counts of published and failed events.
    pub throughput: Arc<Throughput>,
}

impl Heartbeat {
    fn stale_ms(&self) -> i64 {
        i64::try_from((self.interval * 10).as_millis()).unwrap_or(i64::MAX)
    }

    /// Removes this replica's row at graceful shutdown.
    pub async fn leave(&self) -> Result<(), DbError> {
        self.leaving.store(true, Ordering::SeqCst);
        self.db
            .unit(async |c| replicas::forget(c, &self.instance_id).await)
            .await
    }
}

impl Job for Heartbeat {
    const ACTOR: ActorName = ActorName::Heartbeat;
    type Error = DbError;

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let me = self.clone();
        async move {
            if me.leaving.load(Ordering::SeqCst) {
                return Ok(());
            }
            let ring = &me.throughput;
            let last_minute = i64::try_from(ring.published_last_minute()).unwrap_or(i64::MAX);
            let minutes = serde_json::to_value(ring.minutes()).unwrap_or_default();
            me.db
                .unit(async |c| {
                    replicas::beat(c, &me.instance_id, crate::VERSION, me.started_at).await?;
                    replicas::report_throughput(c, &me.instance_id, last_minute, &minutes).await?;
                    replicas::prune(c, me.stale_ms()).await
                })
                .await
        }
        .boxed()
    }
}
