//! The end-to-end scenarios: producer commit to the consumer's effect committed, with the
//! `outbox-consumer` library's inbox on. One consumer per topic (every topic's stream has a
//! group declared to the relay) applies each batch it reads as rows of `bench_effects` in one
//! transaction with the batch's inbox rows (`run_inbox_batches`); the drain ends when every event's effect is committed. The
//! consumers run on a runtime of their own, beside the bench's.

use std::time::{Duration, Instant};

use diesel::sql_types::{Array, Timestamptz, Uuid as SqlUuid};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_consumer::prepared::prepared;
use outbox_consumer::{Consumer, ConsumerConfig, Entry};
use tokio::sync::watch;

use super::harness::{self, BenchEnv, Scratch, Shape, Usage, TOPICS};

/// The consumers' group on every bench topic.
pub const GROUP: &str = "bench";

/// The effects table: one row per applied event, stamped when the effect was written.
pub const EFFECTS_SQL: &str = "CREATE TABLE IF NOT EXISTS bench_effects (
    event_id uuid NOT NULL,
    created_at timestamptz NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)";

/// The relay's setting that declares the group on every bench topic.
pub fn groups_setting() -> String {
    (0..TOPICS)
        .map(|t| format!("bench.topic{t}:{GROUP}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Consumers applying effects until dropped (then they finish what they hold and stop).
pub struct Consumers {
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Consumers {
    /// One inbox consumer per bench topic of `scratch`, on a runtime of two worker threads.
    pub fn start(scratch: &Scratch, env: &BenchEnv) -> anyhow::Result<Consumers> {
        anyhow::ensure!(
            !env.cluster && env.redis_ca.is_none(),
            "the end-to-end scenario runs on a plain single Redis"
        );
        let (stop, stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (url, redis_url, prefix) = (
            scratch.url.clone(),
            env.redis_url.clone(),
            scratch.prefix.clone(),
        );
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                if let Err(e) = consume(&url, &redis_url, &prefix, stopped).await {
                    tracing::error!("bench consumers: {e:#}");
                }
            })
        });
        Ok(Consumers {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Consumers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn consume(
    url: &str,
    redis_url: &str,
    prefix: &str,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(url);
    // No ping before each checkout: the transaction itself finds a dead connection.
    let pool = bb8::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .build(manager)
        .await?;
    let consumers = (0..TOPICS)
        .map(|t| {
            let config = ConsumerConfig::new(redis_url, format!("bench.topic{t}"), GROUP)
                .stream_prefix(prefix)
                .consumer(format!("bench-{t}"))
                .batch_size(200)
                .block(Duration::from_millis(100));
            Consumer::new(config)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let runs = consumers.iter().map(|consumer| {
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        consumer.run_inbox_batches(
            pool.clone(),
            |conn, entries: &[Entry]| {
                let ids: Vec<uuid::Uuid> = entries.iter().map(|e| e.id).collect();
                let created: Vec<chrono::DateTime<chrono::Utc>> =
                    entries.iter().map(|e| e.created_at).collect();
                Box::pin(async move {
                    prepared(
                        diesel::sql_query(
                            "INSERT INTO bench_effects (event_id, created_at)
                             SELECT * FROM unnest($1::uuid[], $2::timestamptz[])",
                        )
                        .bind::<Array<SqlUuid>, _>(ids)
                        .bind::<Array<Timestamptz>, _>(created),
                    )
                    .execute(conn)
                    .await
                    .map(|_| ())
                })
            },
            shutdown,
        )
    });
    futures::future::join_all(runs).await;
    Ok(())
}

/// Preloads `n` events, starts one relay and the consumers, times until every effect is
/// committed.
pub async fn drain(env: &BenchEnv, n: u64) -> anyhow::Result<harness::Drain> {
    let groups = groups_setting();
    let extra = [("OUTBOX__GROUPS", groups.as_str())];
    harness::measure_drain(
        env,
        n,
        Shape::Mixed,
        EFFECTS_SQL,
        async |scratch: &Scratch| {
            let mut conn = scratch.conn().await?;
            let started = Instant::now();
            let consumers = Consumers::start(scratch, env)?;
            let relay = harness::RelayProcess::start(scratch, env, "bench-e2e", &extra)?;
            let deadline = started + Duration::from_secs(600);
            while effects(&mut conn).await? < n {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the effects were not all committed in 10 minutes"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let seconds = started.elapsed().as_secs_f64();
            drop(consumers);
            let (cpu, rss) = relay.stop();
            anyhow::ensure!(
                effects(&mut conn).await? == n,
                "an effect was applied twice"
            );
            Ok(Usage {
                cpu,
                rss,
                seconds: Some(seconds),
                first: None,
            })
        },
    )
    .await
}

/// Committed effects so far.
pub async fn effects(conn: &mut AsyncPgConnection) -> anyhow::Result<u64> {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let row: Count = diesel::sql_query("SELECT count(*) AS n FROM bench_effects")
        .get_result(conn)
        .await?;
    Ok(row.n.max(0) as u64)
}

/// Every effect's latency from its event's commit (its `created_at`) to the effect's write, ms,
/// sorted.
pub async fn latencies(conn: &mut AsyncPgConnection) -> anyhow::Result<Vec<f64>> {
    #[derive(diesel::QueryableByName)]
    struct Ms {
        #[diesel(sql_type = diesel::sql_types::Double)]
        ms: f64,
    }
    let rows: Vec<Ms> = diesel::sql_query(
        "SELECT extract(epoch FROM applied_at - created_at)::float8 * 1000 AS ms
         FROM bench_effects ORDER BY 1",
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.ms.max(0.0)).collect())
}

/// Creates the effects table in the scratch database.
pub async fn create_effects(conn: &mut AsyncPgConnection) -> anyhow::Result<()> {
    conn.batch_execute(EFFECTS_SQL).await?;
    Ok(())
}
