//! The statements of a claim cycle, in the relay's publish transaction.
//!
//! **Claiming**: the claim slots, [`claim_heads`] and [`claim_runs`] (the two statements that
//! lock a batch), their byte budget, and the transaction's tuning.
//!
//! **Settling** the claimed batch: rows that reached their stream are marked published (or
//! deleted), rows held back are postponed, rows that failed through their own fault get their
//! retry or their dead letter.

use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::PARKED_SQL;
use crate::db::DbError;
use outbox_core::prepared::prepared;

/// One locked row, as the publisher needs it.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimedRow {
    /// The event id.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Insertion order.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// Routing name.
    #[diesel(sql_type = Text)]
    pub topic: String,
    /// Ordering key.
    #[diesel(sql_type = Nullable<Text>)]
    pub partition_key: Option<String>,
    /// JSON text of the payload.
    #[diesel(sql_type = Text)]
    pub payload: String,
    /// JSON text of the headers (`{}` when null).
    #[diesel(sql_type = Text)]
    pub headers: String,
    /// When the producer wrote it.
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    /// Failed attempts so far.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// False when `available_at` is still in the future (the run stops there).
    #[diesel(sql_type = Bool)]
    pub ready: bool,
    /// The row version's physical address: stable while we hold its lock, and the cheapest
    /// way back to it for the UPDATE or DELETE of the same transaction (a TID scan).
    #[diesel(sql_type = Text)]
    pub ctid: String,
}

#[cfg(test)]
impl ClaimedRow {
    /// A row as a claim would return it, for the planners' unit tests: `{}` payload and
    /// headers, created now, at ctid `(0,seq)`.
    pub(crate) fn for_test(topic: &str, key: Option<&str>, seq: i64, attempts: i32) -> Self {
        ClaimedRow {
            id: Uuid::new_v4(),
            seq,
            topic: topic.into(),
            partition_key: key.map(Into::into),
            payload: "{}".into(),
            headers: "{}".into(),
            created_at: Utc::now(),
            attempts,
            ready: true,
            ctid: format!("(0,{seq})"),
        }
    }
}

const COLUMNS: &str = "o.id, o.seq, o.topic, o.partition_key, o.payload::text AS payload, \
     COALESCE(o.headers, '{}'::jsonb)::text AS headers, o.created_at, o.attempts, \
     (o.available_at <= now()) AS ready, o.ctid::text AS ctid";

/// The first key of the claim-slot advisory locks (the two-int4 form: its key space is
/// apart from the one-bigint locks used elsewhere).
pub const CLAIM_SLOT_CLASS: i32 = 0x6f62_7278;

/// What a try for a claim slot found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// This transaction holds a slot until it ends.
    Taken,
    /// Every slot is held by transactions younger than the patience: they are draining.
    Busy,
    /// Every slot is held, and at least one holder's transaction is older than the patience:
    /// a hung replica (SIGSTOP, a frozen VM) keeps it until Postgres ends it after
    /// `relay.lease`.
    HolderStuck,
}

/// Tries for one of `slots` cluster-wide claim slots for this transaction (released at commit
/// or rollback), and when none is free, whether a holder looks stuck (its transaction started
/// more than `patience` ago; seeing that needs the holders' `pg_stat_activity` rows: the same
/// role, or `pg_read_all_stats`). Why there are slots: `relay::slots`. The same statement
/// tunes the transaction ([`tune_relay_transaction`]), whatever it finds.
pub async fn take_claim_slot(
    conn: &mut AsyncPgConnection,
    slots: i32,
    patience: std::time::Duration,
) -> Result<Slot, DbError> {
    #[derive(QueryableByName)]
    struct Try {
        #[diesel(sql_type = Bool)]
        taken: bool,
        #[diesel(sql_type = Bool)]
        stuck: bool,
    }
    // LIMIT 1 stops at the first slot taken: no transaction holds two. The lock table is read
    // only when no slot was free (a one-time filter); advisory locks are per database.
    let row: Try = prepared(
        diesel::sql_query(format!(
            "WITH slot AS MATERIALIZED (
                 SELECT 1 FROM generate_series(1, $1) AS s
                 WHERE pg_try_advisory_xact_lock($2, s) LIMIT 1)
             SELECT EXISTS (SELECT 1 FROM slot) AS taken,
                    EXISTS (
                        SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                        WHERE NOT EXISTS (SELECT 1 FROM slot)
                          AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                          AND l.classid = $2::oid
                          AND l.database = (SELECT oid FROM pg_database
                                            WHERE datname = current_database())
                          AND a.xact_start < clock_timestamp() - make_interval(secs => $3)
                    ) AS stuck
             FROM {TUNE}",
        ))
        .bind::<Integer, _>(slots)
        .bind::<Integer, _>(CLAIM_SLOT_CLASS)
        .bind::<diesel::sql_types::Double, _>(patience.as_secs_f64()),
    )
    .get_result(conn)
    .await?;
    Ok(match (row.taken, row.stuck) {
        (true, _) => Slot::Taken,
        (false, true) => Slot::HolderStuck,
        (false, false) => Slot::Busy,
    })
}

/// How much one claim may take: rows, and bytes of payload and headers.
///
/// The byte bound keeps a batch of big events from costing the relay gigabytes (a
/// thousand 1 MiB payloads): over a pod's memory limit it would be killed on the same batch
/// at every restart. A statement returns rows, in `seq` order, while the bytes before them
/// are under the budget, so the first row always comes even when it alone is bigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// `relay.batch_size`.
    pub rows: i64,
    /// `relay.batch_bytes`.
    pub bytes: i64,
}

/// Wraps a claim statement (whose rows have `payload` and `headers` text) so it returns its
/// rows in `seq` order while the bytes before each are under the budget in parameter
/// `$budget`. Rows cut off stay locked until commit: only this batch skips them.
fn within_bytes(inner: &str, budget: usize) -> String {
    format!(
        "SELECT * FROM (
             SELECT c.*, sum(octet_length(c.payload) + octet_length(c.headers))
                         OVER (ORDER BY c.seq) AS upto_bytes
             FROM ({inner}) AS c) AS b
         WHERE upto_bytes - octet_length(payload) - octet_length(headers) < ${budget}
         ORDER BY seq"
    )
}

/// The bytes of a claimed row that count against [`BatchLimits::bytes`].
pub fn row_bytes(row: &ClaimedRow) -> i64 {
    (row.payload.len() + row.headers.len()) as i64
}

/// Which pending rows a head scan looks at.
#[derive(Debug, Clone, Copy)]
pub enum HeadScan {
    /// Only the oldest `n` pending rows: the followers of a hot key are never claimable as
    /// heads, and scanning all of them on every claim would cost O(backlog).
    Oldest(i64),
    /// Everything after the oldest `n`: for when they yielded nothing (all held by other
    /// claimers or blocked behind failing keys), so later events are never starved.
    After(i64),
}

/// Locks up to `limits` of claimable heads among the rows `scan` names; see [`HeadScan`].
/// Claimable: pending, due, topic not paused (nor behind its repair barrier, see
/// `relay::repair`), key not parked ([`super::parked`]), and no earlier pending event of the
/// same key.
pub async fn claim_heads(
    conn: &mut AsyncPgConnection,
    limits: BatchLimits,
    scan: HeadScan,
) -> Result<Vec<ClaimedRow>, DbError> {
    let filter = format!(
        "o.published_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
           AND NOT EXISTS (SELECT 1 FROM outbox_topics t
                       WHERE t.topic = o.topic AND (t.paused OR o.seq > t.repair_below))
           AND NOT {PARKED_SQL}"
    );
    let (sql, window) = match scan {
        // The window is the oldest pending rows, so a key's first row in it is the key's
        // first pending row: heads come from the window alone, with no probe per row. (The
        // probe "is there an earlier pending row of my key?" can be planned as a sequential
        // scan for a hot key, whose every row matches: O(table) per row.)
        // The LATERAL fixes the plan (candidates first, one index lookup each): left to
        // itself, on a table without fresh statistics the planner may loop over every
        // pending row for each candidate.
        // The limit applies after the locks, not to the candidates: the nested loop walks
        // candidates oldest first, skips those another claimer holds and stops at `$1`
        // locked. Limiting the candidates first would give every concurrent claimer the same
        // candidates, which the first one holds, and the others would come back empty.
        HeadScan::Oldest(window) => (
            format!(
                "WITH w AS MATERIALIZED (
                     SELECT seq, topic, partition_key FROM outbox
                     WHERE published_at IS NULL AND dead_at IS NULL
                     ORDER BY seq LIMIT $2),
                 h AS MATERIALIZED (
                     SELECT seq FROM (
                         SELECT seq FROM w WHERE partition_key IS NULL
                         UNION ALL
                         SELECT min(seq) FROM w WHERE partition_key IS NOT NULL
                         GROUP BY topic, partition_key) AS candidates
                     ORDER BY seq)
                 SELECT * FROM (
                     SELECT f.* FROM h CROSS JOIN LATERAL (
                         SELECT {COLUMNS} FROM outbox o
                         WHERE o.seq = h.seq AND {filter}
                         FOR UPDATE OF o SKIP LOCKED) AS f
                     LIMIT $1) AS claimed"
            ),
            window,
        ),
        // No n-th pending row means the window held every pending row: nothing is after it.
        // Past the window a keyed row needs the per-row probe; this is the rare fallback
        // (see `window_has_waiting`).
        HeadScan::After(window) => (
            format!(
                "SELECT {COLUMNS} FROM outbox o
                 WHERE o.seq > COALESCE((
                         SELECT seq FROM outbox
                         WHERE published_at IS NULL AND dead_at IS NULL
                         ORDER BY seq OFFSET $2 - 1 LIMIT 1), 9223372036854775807)
                   AND (o.partition_key IS NULL OR o.seq = (
                         SELECT min(p.seq) FROM outbox p
                         WHERE p.topic = o.topic AND p.partition_key = o.partition_key
                           AND p.published_at IS NULL AND p.dead_at IS NULL))
                   AND {filter}
                 ORDER BY o.seq
                 LIMIT $1
                 FOR UPDATE OF o SKIP LOCKED"
            ),
            window,
        ),
    };
    let query = diesel::sql_query(within_bytes(&sql, 3))
        .bind::<BigInt, _>(limits.rows)
        .bind::<BigInt, _>(window)
        .bind::<BigInt, _>(limits.bytes);
    Ok(prepared(query).load(conn).await?)
}

/// True when the oldest `window` pending rows hold an event that is not due yet, whose topic
/// is paused (or waits behind its repair barrier) or whose key is parked: the cases where
/// nothing in the window may be claimable for a while, so the claimer must look past it.
pub async fn window_has_waiting(
    conn: &mut AsyncPgConnection,
    window: i64,
) -> Result<bool, DbError> {
    #[derive(QueryableByName)]
    struct Waiting {
        #[diesel(sql_type = Bool)]
        waiting: bool,
    }
    let row: Waiting = prepared(
        diesel::sql_query(format!(
            "SELECT EXISTS (
             SELECT 1 FROM (
                 SELECT seq FROM outbox
                 WHERE published_at IS NULL AND dead_at IS NULL
                 ORDER BY seq LIMIT $1) w
             JOIN outbox o ON o.seq = w.seq AND o.published_at IS NULL AND o.dead_at IS NULL
             WHERE o.available_at > now()
                OR EXISTS (SELECT 1 FROM outbox_topics t
                           WHERE t.topic = o.topic AND (t.paused OR o.seq > t.repair_below))
                OR {PARKED_SQL}
         ) AS waiting"
        ))
        .bind::<BigInt, _>(window),
    )
    .get_result(conn)
    .await?;
    Ok(row.waiting)
}

/// Locks up to `limits` of pending events that follow the given key heads (at most
/// `per_key` for each head, in seq order). The per-key LATERAL keeps the work proportional to
/// what is taken, not to the keys' whole backlog.
///
/// A head is the first pending event of its key in the snapshot of `claim_heads`; this
/// statement runs in a newer one (read committed). `seq` is taken at insert, not at commit,
/// so a transaction that committed in between can hold events of the key on both sides of the
/// head: an earlier one, and one that would follow it. Taking the later one now would publish
/// it ahead of its own transaction's earlier event. So a key gets no followers while anything
/// before its head is pending; the head alone goes now (its transaction committed first), the
/// rest in order on the next cycle.
pub async fn claim_runs(
    conn: &AsyncPgConnection,
    heads: &[(String, String, i64)],
    per_key: i64,
    limits: BatchLimits,
) -> Result<Vec<ClaimedRow>, DbError> {
    if heads.is_empty() || limits.rows <= 0 || limits.bytes <= 0 || per_key <= 0 {
        return Ok(Vec::new());
    }
    let topics: Vec<&str> = heads.iter().map(|h| h.0.as_str()).collect();
    let keys: Vec<&str> = heads.iter().map(|h| h.1.as_str()).collect();
    let seqs: Vec<i64> = heads.iter().map(|h| h.2).collect();
    let sql = format!(
        "SELECT f.* FROM unnest($1::text[], $2::text[], $3::bigint[]) AS h(topic, partition_key, seq)
         CROSS JOIN LATERAL (
             SELECT {COLUMNS} FROM outbox o
             WHERE o.topic = h.topic AND o.partition_key = h.partition_key AND o.seq > h.seq
               AND o.published_at IS NULL AND o.dead_at IS NULL AND NOT {PARKED_SQL}
               AND NOT EXISTS (
                   SELECT 1 FROM outbox p
                   WHERE p.topic = h.topic AND p.partition_key = h.partition_key
                     AND p.seq < h.seq AND p.published_at IS NULL AND p.dead_at IS NULL)
             ORDER BY o.seq
             LIMIT $4
             FOR UPDATE OF o) AS f
         LIMIT $5"
    );
    Ok(prepared(
        diesel::sql_query(within_bytes(&sql, 6))
            .bind::<Array<Text>, _>(topics)
            .bind::<Array<Text>, _>(keys)
            .bind::<Array<BigInt>, _>(seqs)
            .bind::<BigInt, _>(per_key)
            .bind::<BigInt, _>(limits.rows)
            .bind::<BigInt, _>(limits.bytes),
    )
    .load(&mut { conn })
    .await?)
}

/// Settings of the relay's own claim transaction, sent in one round trip.
///
/// `synchronous_commit = off` lets it commit without waiting for its WAL flush. Safe for the
/// relay's own transactions, and only for them: if Postgres crashes before the WAL writer
/// flushes, the marks of that commit are lost and the rows are pending again. The next
/// claim republishes them, and the Redis-side dedup (remembering ids for
/// `redis.dedup_window`, minutes) refuses every second XADD; a lost retry schedule only means
/// one attempt is not counted. What it saves is an fsync per cycle, the largest single part
/// of commit-to-stream latency at low rates. Producers' commits and the admin's writes keep
/// the server's `synchronous_commit`.
///
/// `enable_seqscan = off`: every statement of a cycle reaches its rows through an index or
/// by `ctid`, and a sequential scan is always a misestimate. Left free, the planner can pick
/// one to mark rows by `ctid = ANY($1)`, whose cost grows with the rows kept for retention,
/// where the TID scan stays cheap.
///
/// `plan_cache_mode = force_custom_plan`: the statements are prepared once per connection
/// (see `prepared`) but planned for each run, with the table's current size. A generic
/// plan is kept until the next ANALYZE: one made while the table was empty would mark rows
/// by a sequential scan for as long as the relay runs.
///
/// These are `set_config(.., is_local => true)` calls (`SET LOCAL`), in a statement of their
/// own here and folded into [`take_claim_slot`]'s statement when the relay takes a slot: a
/// round trip less per cycle. They take effect for the statements after theirs.
pub async fn tune_relay_transaction(conn: &mut AsyncPgConnection) -> Result<(), DbError> {
    prepared(diesel::sql_query(format!("SELECT 1 FROM {TUNE}")))
        .execute(conn)
        .await?;
    Ok(())
}

/// A one-row relation whose evaluation sets the claim transaction's settings; see
/// [`tune_relay_transaction`].
const TUNE: &str = "(SELECT set_config('synchronous_commit', 'off', true),
                           set_config('enable_seqscan', 'off', true),
                           set_config('plan_cache_mode', 'force_custom_plan', true)) AS tune";

/// Sets `published_at` on events that reached their stream, by the `ctid`s this
/// transaction locked them at.
pub async fn mark_published(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
) -> Result<usize, DbError> {
    by_ctids(
        conn,
        "UPDATE outbox SET published_at = now()
         WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL",
        ctids,
    )
    .await
}

/// Opens the savepoint an overlapped mark runs after: should an event of the batch fail, only
/// the mark is undone ([`undo_overlapped_mark`]), and the batch's row locks, taken before it,
/// are kept.
pub async fn before_overlapped_mark(conn: &mut AsyncPgConnection) -> Result<(), DbError> {
    prepared(diesel::sql_query("SAVEPOINT outbox_overlapped_mark"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Undoes the overlapped mark back to [`before_overlapped_mark`]'s savepoint. The rows are
/// again as claimed, at the same `ctid`s, still locked by this transaction.
pub async fn undo_overlapped_mark(conn: &mut AsyncPgConnection) -> Result<(), DbError> {
    prepared(diesel::sql_query(
        "ROLLBACK TO SAVEPOINT outbox_overlapped_mark",
    ))
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes events that reached their stream (retention `published_for = 0s`), by the
/// `ctid`s this transaction locked them at.
pub async fn delete_published(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
) -> Result<usize, DbError> {
    by_ctids(
        conn,
        "DELETE FROM outbox WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL",
        ctids,
    )
    .await
}

/// Makes events wait `delay_ms` without counting an attempt (the Redis node of their topic is
/// unreachable), by the `ctid`s this transaction locked them at. Later events of their keys
/// wait behind them, as behind a retry.
pub async fn postpone(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
    delay_ms: i64,
) -> Result<usize, DbError> {
    if ctids.is_empty() {
        return Ok(0);
    }
    let sql = "UPDATE outbox SET available_at = now() + $2 * interval '1 millisecond'
               WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL";
    Ok(prepared(
        diesel::sql_query(sql)
            .bind::<Array<Text>, _>(ctids)
            .bind::<BigInt, _>(delay_ms),
    )
    .execute(conn)
    .await?)
}

async fn by_ctids(
    conn: &mut AsyncPgConnection,
    sql: &'static str,
    ctids: &[&str],
) -> Result<usize, DbError> {
    if ctids.is_empty() {
        return Ok(0);
    }
    Ok(
        prepared(diesel::sql_query(sql).bind::<Array<Text>, _>(ctids))
            .execute(conn)
            .await?,
    )
}

/// What to write for one event whose publish failed through its own fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The event.
    pub id: Uuid,
    /// The error, for a person.
    pub error: String,
    /// Delay until the next attempt; ignored when `dead`.
    pub delay_ms: i64,
    /// Dead-letter it now.
    pub dead: bool,
}

/// Records failures: attempts + 1, `last_error`, and either a later `available_at` or `dead_at`.
pub async fn schedule_retry(
    conn: &mut AsyncPgConnection,
    failures: &[Failure],
) -> Result<usize, DbError> {
    if failures.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.id).collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
    let delays: Vec<i64> = failures.iter().map(|f| f.delay_ms).collect();
    let dead: Vec<bool> = failures.iter().map(|f| f.dead).collect();
    Ok(diesel::sql_query(
        "UPDATE outbox o SET
             attempts = o.attempts + 1,
             last_error = f.error,
             available_at = CASE WHEN f.dead THEN o.available_at
                                 ELSE now() + f.delay_ms * interval '1 millisecond' END,
             dead_at = CASE WHEN f.dead THEN now() END
         FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bool[]) AS f(id, error, delay_ms, dead)
         WHERE o.id = f.id",
    )
    .bind::<Array<diesel::sql_types::Uuid>, _>(ids)
    .bind::<Array<Text>, _>(errors)
    .bind::<Array<BigInt>, _>(delays)
    .bind::<Array<Bool>, _>(dead)
    .execute(conn)
    .await?)
}
