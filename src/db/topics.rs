//! All SQL of `outbox_topics`: pausing and resuming, and the publish-side pause check.
//!
//! A pause must be airtight: once `set_paused` returns, no replica publishes the topic. The
//! publish transaction takes a shared advisory lock per topic before checking the flag, and
//! `set_paused` takes it exclusively, so it waits for in-flight batches of that topic and
//! every later batch sees the new flag.

use diesel::sql_types::{Array, BigInt, Bool, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::DbError;

/// Advisory lock class of topic state ("outbox-t").
const TOPIC_LOCK: i64 = 0x6f75_7462_6f78_2d74;

#[derive(QueryableByName)]
struct TopicName {
    #[diesel(sql_type = Text)]
    topic: String,
}

/// Inside the publish transaction: takes the shared lock of each topic, then returns those
/// that are paused (their events must not be published by this batch).
pub async fn lock_and_find_paused(
    conn: &mut AsyncPgConnection,
    topics: &[&str],
) -> Result<Vec<String>, DbError> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    diesel::sql_query(
        "SELECT count(pg_advisory_xact_lock_shared(hashtextextended(t, $2))) FROM unnest($1::text[]) AS u(t)",
    )
    .bind::<Array<Text>, _>(topics)
    .bind::<BigInt, _>(TOPIC_LOCK)
    .execute(conn)
    .await?;
    // A new statement, so a new snapshot: it sees a pause that committed while we waited.
    let paused: Vec<TopicName> =
        diesel::sql_query("SELECT topic FROM outbox_topics WHERE paused AND topic = ANY($1)")
            .bind::<Array<Text>, _>(topics)
            .load(conn)
            .await?;
    Ok(paused.into_iter().map(|t| t.topic).collect())
}

/// Pauses or resumes a topic (a topic with no events yet gets a row too). Returns after every
/// in-flight batch of the topic has committed.
pub async fn set_paused(
    conn: &mut AsyncPgConnection,
    topic: &str,
    paused: bool,
) -> Result<(), DbError> {
    let topic = topic.to_string();
    conn.transaction::<_, DbError, _>(async |c| {
        diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
            .bind::<Text, _>(&topic)
            .bind::<BigInt, _>(TOPIC_LOCK)
            .execute(c)
            .await?;
        diesel::sql_query(
            "INSERT INTO outbox_topics (topic, paused, updated_at) VALUES ($1, $2, now())
             ON CONFLICT (topic) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()",
        )
        .bind::<Text, _>(&topic)
        .bind::<Bool, _>(paused)
        .execute(c)
        .await?;
        if !paused {
            // Wake the claimers: the topic's backlog is claimable again.
            diesel::sql_query("SELECT pg_notify('outbox_events', '')")
                .execute(c)
                .await?;
        }
        Ok(())
    })
    .await
}
