//! The backlog sampler: sets the pending, dead and oldest-pending-age gauges from Postgres
//! every few seconds, so a Prometheus scrape never queries the database.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::periodic::Job;
use crate::db::{outbox, DbError, Pool};

/// The sampler's pool and interval.
#[derive(Clone)]
pub struct BacklogSampler {
    /// The shared pool.
    pub pool: Pool,
    /// Time between samples.
    pub interval: Duration,
}

impl Job for BacklogSampler {
    const NAME: &'static str = "backlog";

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let pool = self.pool.clone();
        async move {
            let mut conn = pool.get().await?;
            let backlog = outbox::backlog(&mut conn).await?;
            crate::telemetry::backlog(&backlog);
            Ok(())
        }
        .boxed()
    }
}
