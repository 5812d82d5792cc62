//! Parked keys (contract section 13): on a topic with `park_on_dead`, a key whose earlier event
//! is dead (and not discarded) is parked, and its later pending events are held back from the
//! claim until that event is retried and published, or discarded. The condition the claim,
//! the backlog age and the counts share, and the queries behind the parked-keys list and the
//! `outbox_parked_events` gauge.

use diesel::sql_types::{BigInt, Nullable, Text, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;

/// True for a pending row `o` held back because its key is parked. Probes
/// `outbox_parking_idx` only on topics that park (the registry's row first).
pub(super) const PARKED_SQL: &str = "(o.partition_key IS NOT NULL
     AND EXISTS (SELECT 1 FROM outbox_topics pt WHERE pt.topic = o.topic AND pt.park_on_dead)
     AND EXISTS (SELECT 1 FROM outbox d
                 WHERE d.topic = o.topic AND d.partition_key = o.partition_key AND d.seq < o.seq
                   AND d.dead_at IS NOT NULL AND d.discarded_at IS NULL))";

/// One parked key of a topic.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct ParkedKey {
    /// The topic.
    #[diesel(sql_type = Text)]
    pub topic: String,
    /// The partition key.
    #[diesel(sql_type = Text)]
    pub key: String,
    /// Its first dead event, which parks it.
    #[diesel(sql_type = SqlUuid)]
    pub dead_id: Uuid,
    /// Its pending events held behind that one.
    #[diesel(sql_type = BigInt)]
    pub held: i64,
}

/// The parked keys of `topic` (of every topic when `None`), by topic and key (none of a
/// topic that does not park).
pub async fn parked_keys(
    conn: &mut AsyncPgConnection,
    topic: Option<&str>,
) -> Result<Vec<ParkedKey>, DbError> {
    Ok(diesel::sql_query(
        "SELECT d.topic, d.partition_key AS key, d.id AS dead_id,
                (SELECT count(*) FROM outbox o
                 WHERE o.topic = d.topic AND o.partition_key = d.partition_key AND o.seq > d.seq
                   AND o.published_at IS NULL AND o.dead_at IS NULL) AS held
         FROM (SELECT DISTINCT ON (topic, partition_key) id, topic, partition_key, seq
               FROM outbox
               WHERE ($1::text IS NULL OR topic = $1) AND partition_key IS NOT NULL
                 AND dead_at IS NOT NULL AND discarded_at IS NULL
               ORDER BY topic, partition_key, seq) AS d
         WHERE EXISTS (SELECT 1 FROM outbox_topics t WHERE t.topic = d.topic AND t.park_on_dead)
         ORDER BY d.topic, d.partition_key",
    )
    .bind::<Nullable<Text>, _>(topic)
    .load(conn)
    .await?)
}

/// Held events per topic that parks its keys, every such topic listed (0 when none is held).
pub async fn held_per_topic(conn: &mut AsyncPgConnection) -> Result<Vec<(String, i64)>, DbError> {
    #[derive(QueryableByName)]
    struct Held {
        #[diesel(sql_type = Text)]
        topic: String,
        #[diesel(sql_type = BigInt)]
        held: i64,
    }
    // From the dead events (few), not the pending ones (a backlog may be long): each key's
    // first dead event and the pending events after it.
    let rows: Vec<Held> = diesel::sql_query(
        "SELECT t.topic, COALESCE((
                SELECT sum((SELECT count(*) FROM outbox o
                            WHERE o.topic = d.topic AND o.partition_key = d.partition_key
                              AND o.seq > d.seq AND o.published_at IS NULL AND o.dead_at IS NULL))
                FROM (SELECT DISTINCT ON (partition_key) topic, partition_key, seq FROM outbox
                      WHERE topic = t.topic AND partition_key IS NOT NULL
                        AND dead_at IS NOT NULL AND discarded_at IS NULL
                      ORDER BY partition_key, seq) AS d), 0)::bigint AS held
         FROM outbox_topics t WHERE t.park_on_dead ORDER BY t.topic",
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.topic, r.held)).collect())
}
