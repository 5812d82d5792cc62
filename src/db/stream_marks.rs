//! All SQL of `outbox_stream_marks`: each stream's last entry id a relay appended, kept across
//! restarts (the publisher keeps them in memory; `relay::marks` saves and loads them).

use diesel::sql_types::{Array, BigInt, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::DbError;
use outbox_core::entry_id::EntryId;

#[derive(QueryableByName)]
struct MarkRow {
    #[diesel(sql_type = Text)]
    stream: String,
    #[diesel(sql_type = BigInt)]
    entry_ms: i64,
    #[diesel(sql_type = BigInt)]
    entry_seq: i64,
}

fn to_sql(id: EntryId) -> (i64, i64) {
    (
        i64::try_from(id.ms).unwrap_or(i64::MAX),
        i64::try_from(id.seq).unwrap_or(i64::MAX),
    )
}

/// Every stored mark.
pub async fn load(conn: &mut AsyncPgConnection) -> Result<Vec<(String, EntryId)>, DbError> {
    let rows: Vec<MarkRow> =
        diesel::sql_query("SELECT stream, entry_ms, entry_seq FROM outbox_stream_marks")
            .load(conn)
            .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let id = EntryId {
                ms: u64::try_from(r.entry_ms).unwrap_or(0),
                seq: u64::try_from(r.entry_seq).unwrap_or(0),
            };
            (r.stream, id)
        })
        .collect())
}

/// Raises the stored marks to `marks` where they are higher (several replicas append to the
/// same streams; the highest mark is the one that tells a loss).
pub async fn raise(
    conn: &mut AsyncPgConnection,
    marks: &[(String, EntryId)],
) -> Result<usize, DbError> {
    if marks.is_empty() {
        return Ok(0);
    }
    let streams: Vec<&str> = marks.iter().map(|(s, _)| s.as_str()).collect();
    let (ms, seq): (Vec<i64>, Vec<i64>) = marks.iter().map(|(_, id)| to_sql(*id)).unzip();
    Ok(diesel::sql_query(
        "INSERT INTO outbox_stream_marks AS m (stream, entry_ms, entry_seq)
         SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
         ON CONFLICT (stream) DO UPDATE
           SET entry_ms = excluded.entry_ms, entry_seq = excluded.entry_seq, updated_at = now()
           WHERE (m.entry_ms, m.entry_seq) < (excluded.entry_ms, excluded.entry_seq)",
    )
    .bind::<Array<Text>, _>(streams)
    .bind::<Array<BigInt>, _>(ms)
    .bind::<Array<BigInt>, _>(seq)
    .execute(conn)
    .await?)
}

/// After a loss was handled: the stream now ends at `id` (none: it holds nothing).
pub async fn reset(
    conn: &mut AsyncPgConnection,
    stream: &str,
    id: Option<EntryId>,
) -> Result<(), DbError> {
    match id {
        Some(id) => {
            let (ms, seq) = to_sql(id);
            diesel::sql_query(
                "UPDATE outbox_stream_marks SET entry_ms = $2, entry_seq = $3, updated_at = now()
                 WHERE stream = $1",
            )
            .bind::<Text, _>(stream)
            .bind::<BigInt, _>(ms)
            .bind::<BigInt, _>(seq)
            .execute(conn)
            .await?;
        }
        None => {
            diesel::sql_query("DELETE FROM outbox_stream_marks WHERE stream = $1")
                .bind::<Text, _>(stream)
                .execute(conn)
                .await?;
        }
    }
    Ok(())
}
