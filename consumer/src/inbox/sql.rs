//! Every statement on the inbox's tables (`outbox_inbox`, `outbox_inbox_fences`): the DDL,
//! applying an effect once (one entry, or a batch in one transaction), raising and checking a
//! partition's fence, and retention. [`super::Inbox`] is what applications use; these
//! functions are public only with the `testing` feature, for the workspace's tests and
//! benchmark, which drive the steps one by one.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

use diesel::sql_types::{Array, BigInt, Double, Integer, Text};
use diesel::OptionalExtension;
use diesel_async::pooled_connection::PoolError;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures::future::BoxFuture;
use std::time::Duration;

use outbox_core::prepared::prepared;
use outbox_core::{Entry, Lease};

/// The tables' DDL, written with `IF NOT EXISTS`: the relay's `migrate` runs the same text
/// (its migrations hold copies of these files, checked equal by its tests), and so does
/// [`ensure_table`].
pub const TABLE_SQL: &str = include_str!("../../sql/inbox.sql");

/// The fences' DDL (see the module's documentation), run by [`ensure_table`] too.
pub const FENCES_SQL: &str = include_str!("../../sql/inbox_fences.sql");

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

#[cfg(feature = "testing")]
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
///
/// When every object is there already nothing is run: `CREATE INDEX IF NOT EXISTS` locks the
/// table before it finds the index, and would wait behind any effect transaction in flight
/// (a consumer frozen inside one holds it until Postgres ends it), so a starting consumer
/// would wait for a stopped one.
pub async fn ensure_table(conn: &mut AsyncPgConnection) -> Result<(), diesel::result::Error> {
    #[derive(diesel::QueryableByName)]
    struct Present {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        present: bool,
    }
    let present: Present = diesel::sql_query(
        "SELECT to_regclass('outbox_inbox') IS NOT NULL
            AND to_regclass('outbox_inbox_processed_at') IS NOT NULL
            AND to_regclass('outbox_inbox_fences') IS NOT NULL AS present",
    )
    .get_result(conn)
    .await?;
    if present.present {
        return Ok(());
    }
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
/// directly on a partitioned topic (the [`Inbox`](super::Inbox) wrapper does it for you). `Err` names the
/// first partition a newer owner holds.
#[cfg(feature = "testing")]
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
