//! All SQL of `outbox_wake`: whether producers' commits notify the relays.

use std::time::Duration;

use diesel::sql_types::Double;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::DbError;

/// Tells the outbox trigger not to NOTIFY for `quiet_for` (measured by Postgres' clock): this
/// replica is claiming continuously and polls on its own meanwhile.
pub async fn announce_busy(
    conn: &mut AsyncPgConnection,
    quiet_for: Duration,
) -> Result<(), DbError> {
    diesel::sql_query(
        "UPDATE outbox_wake
         SET busy_until = greatest(busy_until, clock_timestamp() + make_interval(secs => $1))",
    )
    .bind::<Double, _>(quiet_for.as_secs_f64())
    .execute(conn)
    .await?;
    Ok(())
}
