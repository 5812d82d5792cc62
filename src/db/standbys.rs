//! The standbys' progress (`database.wait_standbys`, contract section 14): how many standbys
//! have flushed the primary's WAL up to a point, read from `pg_stat_replication`.

use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::DbError;

/// How often the wait looks again.
const POLL: Duration = Duration::from_millis(2);

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

/// Waits until `standbys` standbys have flushed the WAL up to where it is now (on `conn`'s
/// server, inside its transaction); false when `timeout` passed first.
pub async fn wait(
    conn: &mut AsyncPgConnection,
    standbys: u32,
    timeout: Duration,
) -> Result<bool, DbError> {
    let at: Lsn = diesel::sql_query("SELECT pg_current_wal_lsn()::text AS lsn")
        .get_result(conn)
        .await?;
    let deadline = Instant::now() + timeout;
    loop {
        let now: Flushed = diesel::sql_query(
            "SELECT count(*) AS flushed FROM pg_stat_replication WHERE flush_lsn >= $1::pg_lsn",
        )
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
