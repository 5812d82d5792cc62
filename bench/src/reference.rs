//! The two references every bench run measures next to the relay:
//! - the seed article's algorithm, with an index on pending rows: one worker claims 10 rows
//!   `FOR UPDATE SKIP LOCKED ORDER BY created_at`, and for each row awaits one XADD and one
//!   UPDATE, then commits;
//! - the ceiling: the relay's own claim SQL and mark, with the Redis step removed, in
//!   [`CEILING_LOOPS`] concurrent loops (`BENCH_CEILING_LOOPS` overrides): the SQL-only loop
//!   goes faster with two than with one, and a ceiling must not flatter the relay.

use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};
use futures::future::try_join_all;
use outbox_relay::db::{outbox, DbError};
use outbox_relay::relay::batch::claim_chains;

use crate::harness::{self, BenchEnv, Drain, Scratch, Shape, Usage};

#[derive(QueryableByName)]
struct SeedRow {
    #[diesel(sql_type = SqlUuid)]
    id: uuid::Uuid,
    #[diesel(sql_type = Text)]
    topic: String,
    #[diesel(sql_type = Text)]
    payload: String,
}

/// The seed article's worker loop, as published but with the index it lacks.
pub async fn seed_algorithm(env: &BenchEnv, n: u64) -> anyhow::Result<Drain> {
    let index = "CREATE INDEX bench_seed_pending ON outbox (created_at) WHERE published_at IS NULL";
    harness::measure_drain(env, n, Shape::Mixed, index, async |scratch: &Scratch| {
        let mut conn = scratch.conn().await?;
        let mut redis = env.redis().await?;
        loop {
            let prefix = scratch.prefix.clone();
            let redis = &mut redis;
            let moved = conn
                .transaction::<usize, anyhow::Error, _>(async |tx| {
                    let rows: Vec<SeedRow> = diesel::sql_query(
                        "SELECT id, topic, payload::text AS payload FROM outbox
                         WHERE published_at IS NULL ORDER BY created_at LIMIT 10
                         FOR UPDATE SKIP LOCKED",
                    )
                    .load(tx)
                    .await?;
                    for row in &rows {
                        let _: String = redis::cmd("XADD")
                            .arg(format!("{prefix}{}", row.topic))
                            .arg("*")
                            .arg("id")
                            .arg(row.id.to_string())
                            .arg("payload")
                            .arg(&row.payload)
                            .query_async(redis)
                            .await?;
                        diesel::sql_query("UPDATE outbox SET published_at = now() WHERE id = $1")
                            .bind::<SqlUuid, _>(row.id)
                            .execute(tx)
                            .await?;
                    }
                    Ok(rows.len())
                })
                .await?;
            if moved == 0 {
                return Ok(Usage::default());
            }
        }
    })
    .await
}

/// Concurrent claim-and-mark loops of the ceiling.
pub const CEILING_LOOPS: usize = 2;

/// The relay's claim and mark with no Redis: what Postgres allows this design.
pub async fn ceiling(env: &BenchEnv, n: u64) -> anyhow::Result<Drain> {
    let defaults = outbox_relay::config::Settings::default();
    let workers = std::env::var("BENCH_CEILING_LOOPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(CEILING_LOOPS);
    let batch = outbox::BatchLimits {
        rows: i64::from(defaults.relay.batch_size),
        bytes: defaults.relay.batch_bytes as i64,
    };
    harness::measure_drain(env, n, Shape::Mixed, "", async |scratch: &Scratch| {
        let loops = (0..workers).map(|_| {
            let url = scratch.url.clone();
            async move {
                let mut c = harness::pg(&url).await?;
                let mut idle = 0;
                while idle < 3 {
                    let claimed = c
                        .transaction::<usize, DbError, _>(async |tx| {
                            outbox::tune_relay_transaction(tx).await?;
                            let claim = claim_chains(tx, batch).await?;
                            let ctids: Vec<&str> = claim
                                .chains
                                .iter()
                                .flatten()
                                .map(|r| r.ctid.as_str())
                                .collect();
                            outbox::mark_published(tx, &ctids).await?;
                            Ok(ctids.len())
                        })
                        .await?;
                    idle = if claimed == 0 { idle + 1 } else { 0 };
                }
                Ok::<_, anyhow::Error>(())
            }
        });
        try_join_all(loops).await?;
        Ok(Usage::default())
    })
    .await
}
