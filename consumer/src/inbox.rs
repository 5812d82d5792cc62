//! The inbox: exactly-once effects on top of at-least-once delivery. For each entry, one
//! transaction in the consumer's database records `(group, event id)` in `outbox_inbox` and
//! runs the handler's effect; a redelivered entry finds its row and skips the effect. All SQL
//! of `outbox_inbox` is here.
//!
//! Two consumers handed the same entry at once (one claimed it from the other) cannot both
//! apply it: the second insert waits on the first one's uncommitted row, then finds it.
//!
//! Retention deletes rows older than [`Inbox::retention`]; it must exceed how
//! long an entry can still be redelivered (until it is acknowledged: a long outage, a
//! backlog), or a very late redelivery would apply its effect a second time.
//!
//! Fencing. On a partitioned topic an entry comes with its partition's [`Lease`]. The inbox
//! raises `outbox_inbox_fences` to the lease's epoch before the first effect under it, and
//! every effect transaction checks, last before its commit, that the fence still holds its
//! epoch (`FOR SHARE`, so a newer owner's raise waits for transactions past the check). A
//! consumer frozen past its lease and resumed therefore cannot commit: its check finds the
//! newer epoch and the transaction rolls back. Such a transaction also gets an
//! `idle_in_transaction_session_timeout`, so a consumer frozen inside one does not hold its
//! locks (and the new owner) for longer than that.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bb8::Pool;
use diesel::sql_types::{Array, BigInt, Double, Integer, Text};
use diesel::OptionalExtension;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, PoolError};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures::future::BoxFuture;

use outbox_core::backoff::ErrorLog;
use outbox_core::prepared::prepared;
use outbox_core::{Entry, Lease};

use crate::handler::{BatchHandler, Handler, HandlerError};

/// The tables' DDL, written with `IF NOT EXISTS`: the relay's `migrate` runs the same text
/// (its migrations hold copies of these files, checked equal by its tests), and so does
/// [`ensure_table`].
pub const TABLE_SQL: &str = include_str!("../sql/inbox.sql");

/// The fences' DDL (see the module's documentation), run by [`ensure_table`] too.
pub const FENCES_SQL: &str = include_str!("../sql/inbox_fences.sql");

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
    /// The fence of the entry's partition was never raised to its lease's epoch: call
    /// [`raise_fence`] (or [`raise_fences`]) before applying entries of a partitioned topic;
    /// the transaction was rolled back.
    #[error("inbox: partition {partition} of `{topic}` was not fenced at this consumer's epoch {epoch}: raise the fence first (inbox::raise_fences)")]
    NotRaised {
        /// The entry's topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// This consumer's epoch.
        epoch: u64,
    },
    /// A newer owner of the entry's partition raised the fence: this consumer no longer owns
    /// it, and the transaction was rolled back.
    #[error("inbox: partition {partition} of `{topic}` is fenced at epoch {fence}, above this consumer's {epoch}: a newer owner holds it")]
    Fenced {
        /// The entry's topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// This consumer's epoch.
        epoch: u64,
        /// The fence's epoch.
        fence: u64,
    },
}

impl<E> InboxError<E> {
    /// No connection, or the inbox statement failed: the database's fault, not the entry's
    /// (the delivery is not counted; see the conversion into a [`HandlerError`]).
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
            "SELECT pg_advisory_xact_lock({DDL_LOCK}); {TABLE_SQL}; {FENCES_SQL}"
        ))
        .await
    })
    .await
}

/// Advisory lock key held while creating the table ("inbox-dd" in ASCII).
pub const DDL_LOCK: i64 = 0x696e_626f_782d_6464;

/// In one transaction on `conn`: records `entry` for `group` in the inbox and, unless it was
/// there already, runs `effect` on the same connection. The effect's error rolls back both.
/// An entry with a [`Lease`] commits only while the fence still holds the lease's epoch
/// ([`raise_fence`] first); else [`InboxError::Fenced`], rolled back.
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
        let inserted = match entry.lease {
            None => {
                prepared(
                    diesel::sql_query(
                        "INSERT INTO outbox_inbox (consumer_group, event_id, topic) VALUES ($1, $2, $3)
                         ON CONFLICT DO NOTHING",
                    )
                    .bind::<Text, _>(group)
                    .bind::<diesel::sql_types::Uuid, _>(entry.id)
                    .bind::<Text, _>(&entry.topic),
                )
                .execute(c)
                .await?
            }
            // The same insert, setting the transaction's idle timeout on the way.
            Some(_) => {
                prepared(
                    diesel::sql_query(
                        "INSERT INTO outbox_inbox (consumer_group, event_id, topic)
                         SELECT $1, $2, $3 FROM (SELECT set_config('idle_in_transaction_session_timeout', $4, true)) AS s
                         ON CONFLICT DO NOTHING",
                    )
                    .bind::<Text, _>(group)
                    .bind::<diesel::sql_types::Uuid, _>(entry.id)
                    .bind::<Text, _>(&entry.topic)
                    .bind::<Text, _>(FENCED_IDLE_TIMEOUT),
                )
                .execute(c)
                .await?
            }
        };
        if inserted == 0 {
            return Ok(Applied::AlreadyDone);
        }
        effect(c, entry).await.map_err(InboxError::Effect)?;
        if let Some(lease) = entry.lease {
            check_fences(c, group, &[(entry.topic.as_str(), lease)]).await?;
        }
        Ok(Applied::Applied)
    })
    .await
}

/// How long a fenced transaction may sit idle (its consumer frozen) before Postgres ends it,
/// releasing its locks for the partition's next owner. Effects that wait on something else
/// inside the transaction for longer than this fail (and are retried).
const FENCED_IDLE_TIMEOUT: &str = "30s";

/// Raises the fence of `topic`'s partition for `group` to `lease`'s epoch, unless it is
/// there or higher: a plain read first, so a fence already raised costs no lock (the raise
/// itself waits for transactions that passed their check under a lower epoch). `Ok(fence)`:
/// the fence's epoch afterwards (above the lease's: a newer owner holds the partition).
pub async fn raise_fence(
    conn: &mut AsyncPgConnection,
    group: &str,
    topic: &str,
    lease: Lease,
) -> Result<u64, diesel::result::Error> {
    let fence = read_fence(conn, group, topic, lease.partition).await?;
    if fence >= lease.epoch {
        return Ok(fence);
    }
    let epoch = i64::try_from(lease.epoch).unwrap_or(i64::MAX);
    let partition = i32::try_from(lease.partition).unwrap_or(i32::MAX);
    diesel::sql_query(
        "INSERT INTO outbox_inbox_fences (consumer_group, topic, partition, epoch)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (consumer_group, topic, partition) DO UPDATE
         SET epoch = EXCLUDED.epoch, raised_at = now()
         WHERE outbox_inbox_fences.epoch < EXCLUDED.epoch",
    )
    .bind::<Text, _>(group)
    .bind::<Text, _>(topic)
    .bind::<Integer, _>(partition)
    .bind::<BigInt, _>(epoch)
    .execute(conn)
    .await?;
    read_fence(conn, group, topic, lease.partition).await
}

/// Raises the fences of every lease among `entries` ([`raise_fence`] each, once per
/// partition); what to call before [`apply_once`] or [`apply_batch_once`] when you use them
/// directly on a partitioned topic (the [`Inbox`] wrapper does it for you). `Err` names the
/// first partition a newer owner holds.
pub async fn raise_fences(
    conn: &mut AsyncPgConnection,
    group: &str,
    entries: &[Entry],
) -> Result<(), InboxError<std::convert::Infallible>> {
    let leases = leases_of(entries);
    for (topic, lease) in leases {
        let fence = raise_fence(conn, group, topic, lease).await?;
        holds(topic, lease, fence)?;
    }
    Ok(())
}

/// The distinct `(topic, lease)` pairs of `entries`.
fn leases_of(entries: &[Entry]) -> Vec<(&str, Lease)> {
    let mut leases: Vec<(&str, Lease)> = entries
        .iter()
        .filter_map(|e| Some((e.topic.as_str(), e.lease?)))
        .collect();
    leases.sort_unstable_by_key(|(t, l)| (*t, l.partition, l.epoch));
    leases.dedup();
    leases
}

/// Whether a fence at `fence` lets `lease` commit: only at its own epoch.
fn holds<E>(topic: &str, lease: Lease, fence: u64) -> Result<(), InboxError<E>> {
    if fence < lease.epoch {
        return Err(InboxError::NotRaised {
            topic: topic.to_string(),
            partition: lease.partition,
            epoch: lease.epoch,
        });
    }
    if fence != lease.epoch {
        return Err(InboxError::Fenced {
            topic: topic.to_string(),
            partition: lease.partition,
            epoch: lease.epoch,
            fence,
        });
    }
    Ok(())
}

/// The fence's epoch now (0 when never raised).
async fn read_fence(
    conn: &mut AsyncPgConnection,
    group: &str,
    topic: &str,
    partition: u32,
) -> Result<u64, diesel::result::Error> {
    #[derive(diesel::QueryableByName)]
    struct Fence {
        #[diesel(sql_type = BigInt)]
        epoch: i64,
    }
    let fence: Option<Fence> = prepared(
        diesel::sql_query(
            "SELECT epoch FROM outbox_inbox_fences
             WHERE consumer_group = $1 AND topic = $2 AND partition = $3",
        )
        .bind::<Text, _>(group)
        .bind::<Text, _>(topic)
        .bind::<Integer, _>(i32::try_from(partition).unwrap_or(i32::MAX)),
    )
    .get_result(conn)
    .await
    .optional()?;
    Ok(fence.map_or(0, |f| u64::try_from(f.epoch).unwrap_or(0)))
}

/// Inside an effect's transaction, last before its commit: every `(topic, lease)` must still
/// be its partition's fence, locked `FOR SHARE` until the commit.
async fn check_fences<E>(
    conn: &mut AsyncPgConnection,
    group: &str,
    leases: &[(&str, Lease)],
) -> Result<(), InboxError<E>> {
    #[derive(diesel::QueryableByName)]
    struct Fence {
        #[diesel(sql_type = Text)]
        topic: String,
        #[diesel(sql_type = Integer)]
        partition: i32,
        #[diesel(sql_type = BigInt)]
        epoch: i64,
    }
    let topics: Vec<&str> = leases.iter().map(|(t, _)| *t).collect();
    let partitions: Vec<i32> = leases
        .iter()
        .map(|(_, l)| i32::try_from(l.partition).unwrap_or(i32::MAX))
        .collect();
    let fences: Vec<Fence> = prepared(
        diesel::sql_query(
            "SELECT topic, partition, epoch FROM outbox_inbox_fences
             WHERE consumer_group = $1
               AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))
             FOR SHARE",
        )
        .bind::<Text, _>(group)
        .bind::<Array<Text>, _>(&topics)
        .bind::<Array<Integer>, _>(&partitions),
    )
    .load(conn)
    .await?;
    for (topic, lease) in leases {
        let fence = fences
            .iter()
            .find(|f| f.topic == *topic && i64::from(f.partition) == i64::from(lease.partition))
            .map_or(0, |f| u64::try_from(f.epoch).unwrap_or(0));
        holds(topic, *lease, fence)?;
    }
    Ok(())
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
    let leases = leases_of(entries);
    conn.transaction(async |c| {
        if !leases.is_empty() {
            diesel::sql_query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)")
                .bind::<Text, _>(FENCED_IDLE_TIMEOUT)
                .execute(c)
                .await?;
        }
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
        if !leases.is_empty() {
            check_fences(c, group, &leases).await?;
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

/// Every `every`, deletes `group`'s rows older than `retention`, in batches, until none is
/// left. Errors are logged (rate-limited) and retried next round.
async fn retention_loop(pool: &PgPool, group: &str, retention: Duration, every: Duration) {
    let mut errors = ErrorLog::new(Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        let round = async {
            let mut conn = pool.get().await.map_err(|e| e.to_string())?;
            let mut deleted = 0;
            loop {
                let n = delete_older_than(&mut conn, group, retention, RETENTION_BATCH)
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
            Ok(deleted) => tracing::debug!(deleted, group, "inbox retention"),
            Err(e) => {
                if let Some(suppressed) = errors.admit(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "inbox retention failed; retrying next round");
                }
            }
        }
    }
}

/// The inbox as a handler wrapper: each entry's ([`Inbox::new`]) or each batch's
/// ([`Inbox::for_batches`], run through [`Batches`](crate::Batches)) `effect` runs in a transaction on a connection from the pool that also records
/// the events in `outbox_inbox`; the entries are acknowledged after the commit, and a
/// redelivered entry is acknowledged without running `effect` again. While the consumer runs,
/// the group's rows older than [`Inbox::retention`] are deleted. The table must exist
/// ([`ensure_table`]).
///
/// `effect` is `Fn(&mut AsyncPgConnection, &Entry) -> BoxFuture<Result<(), E>>` for one entry
/// at a time, or `Fn(&mut AsyncPgConnection, &[Entry]) -> BoxFuture<Result<(), E>>` for
/// batches, where `E` converts into a [`HandlerError`] (any error type: a retry; or a
/// `HandlerError` saying what to do). The inbox's own database failures are outages: they
/// spend no delivery.
///
/// ```no_run
/// # async fn demo(consumer: outbox_consumer::Consumer, pool: outbox_consumer::inbox::PgPool) {
/// use diesel_async::RunQueryDsl;
/// use outbox_consumer::{inbox::Inbox, Entry};
/// let inbox = Inbox::new(pool, |conn, entry: &Entry| {
///     Box::pin(async move {
///         diesel::sql_query("INSERT INTO seen (id) VALUES ($1)")
///             .bind::<diesel::sql_types::Uuid, _>(entry.id)
///             .execute(conn)
///             .await
///             .map(|_| ())
///     })
/// });
/// consumer.run(inbox, std::future::pending::<()>()).await; // your shutdown signal
/// # }
/// ```
pub struct Inbox<F, E> {
    pool: PgPool,
    effect: F,
    retention: Duration,
    cleanup_interval: Duration,
    /// The epoch this inbox raised each (topic, partition)'s fence to.
    raised: Mutex<HashMap<(String, u32), u64>>,
    error: PhantomData<fn() -> E>,
}

impl<F, E> Inbox<F, E> {
    /// The inbox on `pool` around `effect`, one entry at a time: a [`Handler`]. Rows are kept 7
    /// days, the retention checked every minute.
    pub fn new(pool: PgPool, effect: F) -> Self
    where
        F: for<'r> Fn(&'r mut AsyncPgConnection, &'r Entry) -> BoxFuture<'r, Result<(), E>>,
    {
        Inbox::with(pool, effect)
    }

    /// The inbox on `pool` around `effect`, one transaction per batch: a [`BatchHandler`], to
    /// run as `consumer.run(Batches(Inbox::for_batches(pool, effect)), shutdown)`.
    pub fn for_batches(pool: PgPool, effect: F) -> Self
    where
        F: for<'r> Fn(&'r mut AsyncPgConnection, &'r [Entry]) -> BoxFuture<'r, Result<(), E>>,
    {
        Inbox::with(pool, effect)
    }

    fn with(pool: PgPool, effect: F) -> Self {
        Inbox {
            pool,
            effect,
            retention: Duration::from_secs(7 * 24 * 3600),
            cleanup_interval: Duration::from_secs(60),
            raised: Mutex::new(HashMap::new()),
            error: PhantomData,
        }
    }

    /// Inbox rows older than this are deleted. It must exceed how long an entry can still be
    /// redelivered: entries are redelivered until acknowledged, so this is about the longest
    /// outage or backlog you plan to survive; days, not minutes.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How often the retention runs (at least every millisecond).
    pub fn cleanup_interval(mut self, every: Duration) -> Self {
        self.cleanup_interval = every.max(Duration::from_millis(1));
        self
    }

    /// Raises the fences of the leases in `entries` that this inbox has not raised yet: once
    /// per partition and epoch, before the first effect under a new lease.
    async fn raise_fences(
        &self,
        conn: &mut AsyncPgConnection,
        group: &str,
        entries: &[&Entry],
    ) -> Result<(), HandlerError> {
        for entry in entries {
            let Some(lease) = entry.lease else {
                continue;
            };
            let slot = (entry.topic.clone(), lease.partition);
            if self.raised_epoch(&slot) == Some(lease.epoch) {
                continue;
            }
            let fence = raise_fence(conn, group, &entry.topic, lease)
                .await
                .map_err(|e| HandlerError::outage(format!("inbox: raising the fence: {e}")))?;
            if fence != lease.epoch {
                return Err(fenced(&entry.topic, lease.partition, lease.epoch, fence));
            }
            tracing::debug!(topic = %entry.topic, partition = lease.partition, epoch = lease.epoch, "inbox fence raised");
            self.raised
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(slot, lease.epoch);
        }
        Ok(())
    }

    fn raised_epoch(&self, slot: &(String, u32)) -> Option<u64> {
        self.raised
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(slot)
            .copied()
    }

    async fn maintain_group(&self, group: &str) {
        retention_loop(&self.pool, group, self.retention, self.cleanup_interval).await
    }
}

/// A fence's refusal as the consumer takes it.
fn fenced(topic: &str, partition: u32, epoch: u64, fence: u64) -> HandlerError {
    HandlerError::fenced(format!(
        "inbox: partition {partition} of `{topic}` is fenced at epoch {fence}, above this consumer's {epoch}: a newer owner holds it"
    ))
}

impl<E: Into<HandlerError>> InboxError<E> {
    /// What the consumer makes of it: the effect's error as the effect said; the inbox's own
    /// database failures as outages; a fence's refusal as [`ErrorKind::Fenced`](crate::ErrorKind).
    fn into_handler_error(self) -> HandlerError {
        match self {
            InboxError::Effect(e) => e.into(),
            InboxError::Fenced {
                topic,
                partition,
                epoch,
                fence,
            } => fenced(&topic, partition, epoch, fence),
            InboxError::NotRaised {
                topic,
                partition,
                epoch,
            } => HandlerError::retry(format!(
                "inbox: partition {partition} of `{topic}` was not fenced at this consumer's epoch {epoch}: raise the fence first (inbox::raise_fences)"
            )),
            InboxError::Pool(e) => {
                HandlerError::outage(format!("inbox: no database connection: {e}"))
            }
            InboxError::Db(e) => HandlerError::outage(format!("inbox: database error: {e}")),
        }
    }
}

impl<F, E> Handler for Inbox<F, E>
where
    F: for<'r> Fn(&'r mut AsyncPgConnection, &'r Entry) -> BoxFuture<'r, Result<(), E>> + Sync,
    E: Into<HandlerError> + Send,
{
    async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
        let mut conn = self
            .pool
            .get()
            .await
            .map_err(|e| InboxError::<E>::Pool(e).into_handler_error())?;
        self.raise_fences(&mut conn, &entry.group, &[&entry])
            .await?;
        let applied = apply_once(&mut conn, &entry.group, &entry, &self.effect).await;
        match applied.map_err(InboxError::into_handler_error)? {
            Applied::Applied => {}
            Applied::AlreadyDone => tracing::debug!(
                event_id = %entry.id, stream_id = %entry.stream_id,
                "already in the inbox: effect skipped"
            ),
        }
        Ok(())
    }

    async fn maintain(&self, group: &str) {
        self.maintain_group(group).await
    }
}

/// One transaction per batch instead of one per event, so the consumer's database is no
/// longer the limit; per-key order holds within the batch if `effect` applies the entries in
/// the order given (stream order). A failing batch is retried whole, and its entries go to the
/// dead stream after `max_deliveries`.
impl<F, E> BatchHandler for Inbox<F, E>
where
    F: for<'r> Fn(&'r mut AsyncPgConnection, &'r [Entry]) -> BoxFuture<'r, Result<(), E>> + Sync,
    E: Into<HandlerError> + Send,
{
    async fn handle_batch(&self, entries: Vec<Entry>) -> Result<(), HandlerError> {
        let Some(group) = <[Entry]>::first(&entries).map(|e| e.group.clone()) else {
            return Ok(());
        };
        let mut conn = self
            .pool
            .get()
            .await
            .map_err(|e| InboxError::<E>::Pool(e).into_handler_error())?;
        let refs: Vec<&Entry> = entries.iter().collect();
        self.raise_fences(&mut conn, &group, &refs).await?;
        let applied = apply_batch_once(&mut conn, &group, &entries, &self.effect)
            .await
            .map_err(InboxError::into_handler_error)?;
        if applied < entries.len() {
            tracing::debug!(
                skipped = entries.len() - applied,
                "already in the inbox: effects skipped"
            );
        }
        Ok(())
    }

    async fn maintain(&self, group: &str) {
        self.maintain_group(group).await
    }
}
