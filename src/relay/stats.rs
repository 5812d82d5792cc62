//! The backlog sampler: sets the pending, dead, parked, oldest-pending-age and standby-lag
//! gauges from Postgres every few seconds, so a Prometheus scrape never queries the database;
//! gives `/healthz` the pending count; and makes every known topic's counters exist before its
//! first publish.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::AsyncPgConnection;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::health::Health;
use super::periodic::Job;
use crate::db::{outbox, topics, Db, DbError};
use crate::telemetry::ActorName;

/// The sampler's pool and interval.
#[derive(Clone)]
pub struct BacklogSampler {
    /// The shared pool.
    pub db: Db,
    /// Time between samples.
    pub interval: Duration,
    /// Where `/healthz` reads the pending count.
    pub health: Arc<Health>,
}

impl Job for BacklogSampler {
    const ACTOR: ActorName = ActorName::Backlog;
    type Error = DbError;

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let db = self.db.clone();
        let health = self.health.clone();
        async move {
            let (backlog, parked, standbys) = db
                .unit(async |c| {
                    let backlog = outbox::backlog(c).await?;
                    let parked = outbox::parked::held_per_topic(c).await?;
                    register_topics(c).await?;
                    // Last, and apart: the backlog is sampled even if this cannot be read.
                    let standbys = crate::db::standbys::replication(c).await;
                    Ok::<_, DbError>((backlog, parked, standbys))
                })
                .await?;
            for (topic, held) in parked {
                crate::telemetry::parked_events(&topic, held);
            }
            crate::telemetry::backlog(
                backlog.pending,
                backlog.dead,
                backlog.oldest_pending_age_seconds,
            );
            health.set_pending(backlog.pending);
            let standbys = standbys?;
            let streaming = standbys.len();
            let lags: Vec<(String, i64)> = standbys
                .into_iter()
                .filter_map(|s| Some((s.name, s.lag_bytes?)))
                .collect();
            crate::telemetry::standbys_sampled(streaming, &lags);
            Ok(())
        }
        .boxed()
    }
}

/// Makes every topic's counters exist (at 0) before its first publish, so a dashboard shows 0,
/// not "no data", and an `absent()` alert stays quiet on a healthy idle relay.
pub async fn register_topics(conn: &mut AsyncPgConnection) -> Result<(), DbError> {
    for topic in topics::known(conn).await? {
        crate::telemetry::topic_known(&topic);
    }
    Ok(())
}
