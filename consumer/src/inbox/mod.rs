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
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::AsyncPgConnection;
use futures::future::BoxFuture;

use outbox_core::backoff::ErrorLog;
use outbox_core::Entry;

use crate::handler::{BatchHandler, Handler, HandlerError};

mod sql;

pub use sql::ensure_table;
// The steps one by one, for the workspace's tests and benchmark: no stability promise.
#[cfg(feature = "testing")]
pub use sql::{
    apply_batch_once, apply_once, delete_older_than, raise_fence, raise_fences, Applied,
    InboxError, DDL_LOCK, FENCES_SQL, TABLE_SQL,
};
#[cfg(not(feature = "testing"))]
use sql::{apply_batch_once, apply_once, delete_older_than, raise_fence, Applied, InboxError};

/// A bb8 pool of diesel-async Postgres connections, as the inbox takes it.
pub type PgPool = Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// Rows deleted per retention statement: small enough not to hold locks long.
const RETENTION_BATCH: i64 = 1000;

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
