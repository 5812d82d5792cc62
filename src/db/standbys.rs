//! The standbys' progress (`database.wait_standbys`, contract section 14): how many standbys
//! have flushed the primary's WAL up to a point, read from `pg_stat_replication`.

use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::DbError;

/// The rows of `pg_stat_replication` that are standbys: not a logical decoding client (a CDC
/// connector's slot flushes what it decoded, which no failover can be made to) nor a base
/// backup being taken.
const PHYSICAL: &str = "state <> 'backup'
    AND pid NOT IN (SELECT active_pid FROM pg_replication_slots
                     WHERE slot_type = 'logical' AND active_pid IS NOT NULL)";

/// How often the wait looks again.
const POLL: Duration = Duration::from_millis(1);

#[derive(QueryableByName)]
struct Lsn {
    #[diesel(sql_type = Text)]
    lsn: String,
}

#[derive(QueryableByName)]
struct Flushed {
    #[diesel(sql_type = BigInt)]
    flushed: i64,
}

#[derive(QueryableByName)]
struct Reader {
    #[diesel(sql_type = Text)]
    role: String,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    sees: bool,
}

/// The connection's role, and whether it sees the standbys' progress in `pg_stat_replication`
/// (a superuser or a member of `pg_monitor`; others read its LSN columns as null).
pub async fn can_read_progress(conn: &mut AsyncPgConnection) -> Result<(String, bool), DbError> {
    let r: Reader = diesel::sql_query(
        "SELECT current_user::text AS role,
                (pg_has_role(current_user, 'pg_monitor', 'MEMBER')
                 OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)) AS sees",
    )
    .get_result(conn)
    .await?;
    Ok((r.role, r.sees))
}

/// Waits until `standbys` standbys have flushed the WAL up to where the server has flushed it
/// now (on `conn`'s server, inside its transaction); false when `timeout` passed first.
///
/// The server's flush point, not its write point: a transaction that commits with
/// `synchronous_commit` on (the default) is visible only after its commit record is flushed,
/// so every row a claim saw is behind that point. The write point can be ahead of it by this
/// very transaction's uncommitted claim, which a standby only receives once something flushes
/// it (another commit, or the WAL writer up to `wal_writer_delay` later): waiting for it would
/// stall every batch for nothing. A producer committing with `synchronous_commit = off`
/// accepts losing its last commits in any crash of the primary, failover or not; no wait of
/// the relay's can cover those.
pub async fn wait(
    conn: &mut AsyncPgConnection,
    standbys: u32,
    timeout: Duration,
) -> Result<bool, DbError> {
    let at: Lsn = diesel::sql_query("SELECT pg_current_wal_flush_lsn()::text AS lsn")
        .get_result(conn)
        .await?;
    let deadline = Instant::now() + timeout;
    loop {
        let now: Flushed = diesel::sql_query(format!(
            "SELECT count(*) AS flushed FROM pg_stat_replication
              WHERE flush_lsn >= $1::pg_lsn AND {PHYSICAL}"
        ))
        .bind::<Text, _>(&at.lsn)
        .get_result(conn)
        .await?;
        if now.flushed >= i64::from(standbys) {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The server a connection is on: the primary the relay writes to.
#[derive(Debug, Clone, QueryableByName)]
pub struct Server {
    /// `host:port` as the server sees its own end of the connection (`local socket` for a
    /// Unix socket).
    #[diesel(sql_type = Text)]
    pub address: String,
    /// `server_version`.
    #[diesel(sql_type = Text)]
    pub version: String,
    /// Whether it is a standby (then it is not where the relay writes).
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub in_recovery: bool,
}

/// The server `conn` is on.
pub async fn server(conn: &mut AsyncPgConnection) -> Result<Server, DbError> {
    Ok(diesel::sql_query(
        "SELECT coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local socket')
                  AS address,
                current_setting('server_version') AS version,
                pg_is_in_recovery() AS in_recovery",
    )
    .get_result(conn)
    .await?)
}

/// One standby streaming from the primary, as `pg_stat_replication` shows it.
#[derive(Debug, Clone, QueryableByName)]
pub struct Standby {
    /// Its `application_name`, with its address where two share one (see [`replication`]).
    #[diesel(sql_type = Text)]
    pub name: String,
    /// `client_addr:client_port`, `local socket` for a Unix socket.
    #[diesel(sql_type = Text)]
    pub address: String,
    /// `streaming`, `catchup`, ...
    #[diesel(sql_type = Text)]
    pub state: String,
    /// `async`, `sync`, `quorum` or `potential`.
    #[diesel(sql_type = Text)]
    pub sync_state: String,
    /// WAL bytes the primary wrote that the standby has not flushed; `None` when the relay's
    /// role cannot read the standbys' progress (it needs `pg_monitor`), or when the server is
    /// itself a standby (cascading replication: it has no WAL position of its own to compare).
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    pub lag_bytes: Option<i64>,
    /// How long ago the standby last replayed what it had flushed, as Postgres measures it.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Double>)]
    pub replay_lag_seconds: Option<f64>,
}

/// The standbys streaming from the server `conn` is on (logical decoding clients left out). A
/// name two standbys share (a `primary_conninfo` without `application_name` gives
/// `walreceiver` to each) gets the standby's address appended, so each has a name of its own.
pub async fn replication(conn: &mut AsyncPgConnection) -> Result<Vec<Standby>, DbError> {
    let mut standbys: Vec<Standby> = diesel::sql_query(format!(
        "SELECT coalesce(application_name, '') AS name,
                coalesce(host(client_addr) || ':' || client_port, 'local socket') AS address,
                coalesce(state, '') AS state,
                coalesce(sync_state, '') AS sync_state,
                CASE WHEN NOT pg_is_in_recovery()
                     THEN pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::bigint
                END AS lag_bytes,
                extract(epoch FROM replay_lag)::float8 AS replay_lag_seconds
           FROM pg_stat_replication
          WHERE {PHYSICAL}
          ORDER BY application_name, client_addr, client_port"
    ))
    .load(conn)
    .await?;
    let names: Vec<String> = standbys.iter().map(|s| s.name.clone()).collect();
    for s in &mut standbys {
        if names.iter().filter(|n| **n == s.name).count() > 1 || s.name.is_empty() {
            s.name = format!("{}@{}", s.name, s.address);
        }
    }
    Ok(standbys)
}
