//! The retention cleaner: deletes published rows older than `retention.published_for`, in
//! small batches, on one replica at a time (a transaction-scoped advisory lock: no leader to
//! elect, nothing to release if a replica dies). Unpublished and dead rows are never touched,
//! except dead letters an operator discarded, which go after the same time as published ones.
//! It also forgets idempotency keys of the admin API older than a day.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::periodic::Job;
use crate::db::{idempotency, outbox, Db, DbError};
use crate::telemetry::ActorName;

/// The cleaner's settings and pool.
#[derive(Clone)]
pub struct Cleaner {
    /// The shared pool.
    pub db: Db,
    /// `retention.published_for`.
    pub published_for: Duration,
    /// `retention.interval`.
    pub interval: Duration,
    /// `retention.batch_size`.
    pub batch_size: u32,
}

/// Rows deleted by one run, or `None` when another replica held the lock.
pub async fn run_once(cleaner: &Cleaner) -> Result<Option<usize>, DbError> {
    let older_than_ms = i64::try_from(cleaner.published_for.as_millis()).unwrap_or(i64::MAX);
    let mut total = 0;
    loop {
        let batch = i64::from(cleaner.batch_size);
        match cleaner
            .db
            .unit(async |c| outbox::delete_published_before(c, older_than_ms, batch).await)
            .await?
        {
            None => return Ok(None),
            Some(n) => {
                total += n;
                if n < cleaner.batch_size as usize {
                    break;
                }
            }
        }
        // Between batches, let the claim loop have the database.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if total > 0 {
        crate::telemetry::retention_deleted(total);
    }
    // Expired keys are also ignored at lookup; this only bounds the table. Only the replica
    // that held the retention lock gets here.
    let batch = i64::from(cleaner.batch_size);
    cleaner
        .db
        .unit(async |c| idempotency::expire(c, batch).await)
        .await?;
    Ok(Some(total))
}

impl Job for Cleaner {
    const ACTOR: ActorName = ActorName::Retention;
    type Error = DbError;

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let me = self.clone();
        async move { run_once(&me).await.map(|_| ()) }.boxed()
    }
}
