//! The inbox: exactly-once effects on top of at-least-once delivery. For each entry, one
//! transaction in the consumer's database records `(group, event id)` in `outbox_inbox` and
//! runs the handler's effect; a redelivered entry finds its row and skips the effect. All SQL
//! of `outbox_inbox` is here.
//!
//! Two consumers handed the same entry at once (one claimed it from the other) cannot both
//! apply it: the second insert waits on the first one's uncommitted row, then finds it.
//!
//! Retention deletes rows older than [`ConsumerConfig::inbox_retention`]; it must exceed how
//! long an entry can still be redelivered (until it is acknowledged: a long outage, a
//! backlog), or a very late redelivery would apply its effect a second time.

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use bb8::Pool;
use diesel::sql_types::{BigInt, Double, Text};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, PoolError};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures::future::BoxFuture;

use crate::config::ConsumerConfig;
use crate::consumer::{Consumer, RunStats};
use crate::entry::Entry;
use crate::handling::{Batch, Each, Process};
use crate::prepared::prepared;
use crate::retry::ErrorLog;

/// The table's DDL: the migration of the relay's `migrations/` folder, written with
/// `IF NOT EXISTS`, so the relay's `migrate` and [`ensure_table`] run the same text.
pub const TABLE_SQL: &str = include_str!("../../migrations/2026-12-07-000001_inbox/up.sql");

/// A bb8 pool of diesel-async Postgres connections, as the inbox takes it.
pub type PgPool = Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// Rows deleted per retention statement: small enough not to hold locks long.
const RETENTION_BATCH: i64 = 1000;

/// Why an inbox delivery failed (the entry is retried, like any handler error).
#[derive(Debug, thiserror::Error)]
pub enum InboxError<E> {
    /// No connection from the pool (Postgres away, pool exhausted).
    #[error("inbox: no database connection: {0}")]
    Pool(bb8::RunError<PoolError>),
    /// The inbox insert, or the transaction's begin or commit, failed.
    #[error("inbox: database error: {0}")]
    Db(diesel::result::Error),
    /// The effect failed; the transaction was rolled back.
    #[error("{0}")]
    Effect(E),
}

impl<E> InboxError<E> {
    /// No connection, or the inbox statement failed: the database's fault, not the entry's
    /// (the delivery is not counted).
    pub fn is_outage(&self) -> bool {
        matches!(self, InboxError::Pool(_) | InboxError::Db(_))
    }
}

impl<E> From<diesel::result::Error> for InboxError<E> {
    fn from(e: diesel::result::Error) -> Self {
        InboxError::Db(e)
    }
}

/// What [`apply_once`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The effect ran and committed with the inbox row.
    Applied,
    /// The inbox already had the event: the effect was skipped.
    AlreadyDone,
}

/// Creates `outbox_inbox` and its index if missing (the consumer's database need not be the
/// outbox's, where `outbox-relay migrate` creates it).
/// Consumers starting together on a fresh database are serialized by an advisory lock:
/// concurrent `CREATE TABLE IF NOT EXISTS` can fail on Postgres' catalog unique index.
pub async fn ensure_table(conn: &mut AsyncPgConnection) -> Result<(), diesel::result::Error> {
    conn.transaction(async |c| {
        c.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock({DDL_LOCK}); {TABLE_SQL}"
        ))
        .await
    })
    .await
}

/// Advisory lock key held while creating the table ("inbox-dd" in ASCII).
pub const DDL_LOCK: i64 = 0x696e_626f_782d_6464;

/// In one transaction on `conn`: records `entry` for `group` in the inbox and, unless it was
/// there already, runs `effect` on the same connection. The effect's error rolls back both.
pub async fn apply_once<F, E>(
    conn: &mut AsyncPgConnection,
    group: &str,
    entry: &Entry,
    effect: &F,
) -> Result<Applied, InboxError<E>>
where
    F: for<'r> Fn(&'r mut AsyncPgConnection, &'r Entry) -> BoxFuture<'r, Result<(), E>> + Sync,
    E: Send,
{
    conn.transaction(async |c| {
        let inserted = prepared(
            diesel::sql_query(
                "INSERT INTO outbox_inbox (consumer_group, event_id, topic) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
            )
            .bind::<Text, _>(group)
            .bind::<diesel::sql_types::Uuid, _>(entry.id)
            .bind::<Text, _>(&entry.topic),
        )
        .execute(c)
        .await?;
        if inserted == 0 {
            return Ok(Applied::AlreadyDone);
        }
        effect(c, entry).await.map_err(InboxError::Effect)?;
        Ok(Applied::Applied)
    })
    .await
}

/// In one transaction on `conn`: records every entry of `entries` for `group` in the inbox and
/// runs `effect` once on those not recorded before (in the given order, an event id that
/// appears twice only once); returns how many were new. The effect's error rolls back all.
/// One commit for the whole batch: what makes a consumer keep up with the relay.
pub async fn apply_batch_once<F, E>(
    conn: &mut AsyncPgConnection,
    group: &str,
    entries: &[Entry],
    effect: &F,
) -> Result<usize, InboxError<E>>
where
    F: for<'r> Fn(&'r mut AsyncPgConnection, &'r [Entry]) -> BoxFuture<'r, Result<(), E>> + Sync,
    E: Send,
{
    #[derive(diesel::QueryableByName)]
    struct New {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        event_id: uuid::Uuid,
    }
    let ids: Vec<uuid::Uuid> = entries.iter().map(|e| e.id).collect();
    let topics: Vec<&str> = entries.iter().map(|e| e.topic.as_str()).collect();
    conn.transaction(async |c| {
        // DO NOTHING also skips an id repeated within the batch (the first one is inserted).
        let new: Vec<New> = prepared(
            diesel::sql_query(
                "INSERT INTO outbox_inbox (consumer_group, event_id, topic)
                 SELECT $1, id, topic FROM unnest($2::uuid[], $3::text[]) AS t(id, topic)
                 ON CONFLICT DO NOTHING RETURNING event_id",
            )
            .bind::<Text, _>(group)
            .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(&ids)
            .bind::<diesel::sql_types::Array<Text>, _>(&topics),
        )
        .load(c)
        .await?;
        let mut new: std::collections::HashSet<uuid::Uuid> =
            new.into_iter().map(|n| n.event_id).collect();
        let fresh: Vec<Entry> = entries
            .iter()
            .filter(|e| new.remove(&e.id))
            .cloned()
            .collect();
        if !fresh.is_empty() {
            effect(c, &fresh).await.map_err(InboxError::Effect)?;
        }
        Ok(fresh.len())
    })
    .await
}

/// Deletes up to `limit` of `group`'s inbox rows processed more than `older_than` ago, oldest
/// first; returns how many.
pub async fn delete_older_than(
    conn: &mut AsyncPgConnection,
    group: &str,
    older_than: Duration,
    limit: i64,
) -> Result<usize, diesel::result::Error> {
    diesel::sql_query(
        "DELETE FROM outbox_inbox WHERE consumer_group = $1 AND event_id IN (
             SELECT event_id FROM outbox_inbox
             WHERE consumer_group = $1 AND processed_at < now() - make_interval(secs => $2)
             ORDER BY processed_at LIMIT $3)",
    )
    .bind::<Text, _>(group)
    .bind::<Double, _>(older_than.as_secs_f64())
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await
}

/// Every `inbox_cleanup_interval`, deletes the group's rows older than `inbox_retention`, in
/// batches, until none is left. Errors are logged (rate-limited) and retried next round.
async fn retention_loop(pool: &PgPool, config: &ConsumerConfig) -> Infallible {
    let mut errors = ErrorLog::new(Duration::from_secs(60));
    loop {
        tokio::time::sleep(config.inbox_cleanup_interval).await;
        let round = async {
            let mut conn = pool.get().await.map_err(|e| e.to_string())?;
            let mut deleted = 0;
            loop {
                let n = delete_older_than(
                    &mut conn,
                    &config.group,
                    config.inbox_retention,
                    RETENTION_BATCH,
                )
                .await
                .map_err(|e| e.to_string())?;
                deleted += n;
                if (n as i64) < RETENTION_BATCH {
                    return Ok::<usize, String>(deleted);
                }
            }
        };
        match round.await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, group = %config.group, "inbox retention"),
            Err(e) => {
                if let Some(suppressed) = errors.admit(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "inbox retention failed; retrying next round");
                }
            }
        }
    }
}

impl Consumer {
    /// Runs like [`Consumer::run`], with the inbox: for each entry, `effect` runs in a
    /// transaction on a connection from `pool` that also records the event in
    /// `outbox_inbox` (see [`apply_once`]); the entry is acknowledged after the commit. A
    /// redelivered entry is acknowledged without running `effect` again. Also runs the
    /// inbox retention. The table must exist ([`ensure_table`]).
    ///
    /// ```no_run
    /// # async fn demo(consumer: outbox_consumer::Consumer, pool: outbox_consumer::inbox::PgPool) {
    /// use diesel_async::RunQueryDsl;
    /// consumer
    ///     .run_inbox(
    ///         pool,
    ///         |conn, entry| {
    ///             Box::pin(async move {
    ///                 diesel::sql_query("INSERT INTO seen (id) VALUES ($1)")
    ///                     .bind::<diesel::sql_types::Uuid, _>(entry.id)
    ///                     .execute(conn)
    ///                     .await
    ///                     .map(|_| ())
    ///             })
    ///         },
    ///         std::future::pending::<()>(), // your shutdown signal
    ///     )
    ///     .await;
    /// # }
    /// ```
    pub async fn run_inbox<F, E>(
        &self,
        pool: PgPool,
        effect: F,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats
    where
        F: for<'r> Fn(&'r mut AsyncPgConnection, &'r Entry) -> BoxFuture<'r, Result<(), E>> + Sync,
        E: Display + Send,
    {
        let group = self.config().group.clone();
        let (pool, effect, group) = (&pool, &effect, group.as_str());
        let handler = move |entry: Entry| async move {
            let mut conn = pool.get().await.map_err(InboxError::Pool)?;
            match apply_once(&mut conn, group, &entry, effect).await? {
                Applied::Applied => {}
                Applied::AlreadyDone => tracing::debug!(
                    event_id = %entry.id, stream_id = %entry.stream_id,
                    "already in the inbox: effect skipped"
                ),
            }
            Ok::<(), InboxError<E>>(())
        };
        let each = Each::with_outages(handler, InboxError::is_outage);
        self.run_with_retention(&each, pool, shutdown).await
    }

    /// Runs `process` beside the inbox retention until `shutdown`.
    async fn run_with_retention<P: Process>(
        &self,
        process: &P,
        pool: &PgPool,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats {
        tokio::select! {
            biased;
            stats = self.run_with(process, shutdown) => stats,
            never = retention_loop(pool, self.config()) => match never {},
        }
    }

    /// Runs like [`Consumer::run_batches`], with the inbox: each batch's effect runs in one
    /// transaction that also records its events in `outbox_inbox` (see [`apply_batch_once`]),
    /// on the entries not applied before; the batch is acknowledged after the commit. One
    /// commit per batch instead of one per event, so the consumer's database is no longer
    /// the limit; per-key order holds within the batch if `effect` applies the entries in the
    /// order given (stream order). A failing batch is retried whole, and its entries go to
    /// the dead stream after `max_deliveries`: use [`Consumer::run_inbox`] when one bad event
    /// must not take its neighbours along.
    pub async fn run_inbox_batches<F, E>(
        &self,
        pool: PgPool,
        effect: F,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats
    where
        F: for<'r> Fn(&'r mut AsyncPgConnection, &'r [Entry]) -> BoxFuture<'r, Result<(), E>>
            + Sync,
        E: Display + Send,
    {
        let group = self.config().group.clone();
        let (pool, effect, group) = (&pool, &effect, group.as_str());
        let handler = move |entries: Vec<Entry>| async move {
            let mut conn = pool.get().await.map_err(InboxError::Pool)?;
            let applied = apply_batch_once(&mut conn, group, &entries, effect).await?;
            if applied < entries.len() {
                tracing::debug!(
                    skipped = entries.len() - applied,
                    "already in the inbox: effects skipped"
                );
            }
            Ok::<(), InboxError<E>>(())
        };
        let batch = Batch::with_outages(handler, InboxError::is_outage);
        self.run_with_retention(&batch, pool, shutdown).await
    }
}
