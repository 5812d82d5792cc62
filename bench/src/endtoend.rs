//! The end-to-end scenarios: producer commit to the consumer's effect committed, with the
//! `outbox-consumer` library's inbox on. The group (declared to the relay on every topic's
//! stream) has [`CONSUMERS`] members, each reading every topic in one XREADGROUP and applying
//! what it read as rows of `bench_effects` in one transaction with the inbox rows
//! (`inbox::apply_batch_once`, what the library's `Batches(Inbox::for_batches(..))` runs for
//! a batch); the drain ends when every event's effect is committed. The consumers run on a
//! runtime of their own, beside the bench's, and note when each effect's commit returned, on
//! the clock the producers note their commits with.

use std::time::{Duration, Instant};

use diesel::sql_types::{Array, BigInt, Timestamptz, Uuid as SqlUuid};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_consumer::inbox;
use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry, HandlerError};
use outbox_core::prepared::prepared;
use tokio::sync::watch;

use crate::harness::{self, BenchEnv, FirstEntries, Scratch, Shape, Usage, TOPICS};
use crate::percentiles::Percentiles;
use crate::traffic::Moments;

/// The consumers' group on every bench topic.
pub const GROUP: &str = "bench";

/// Members of the group, each reading all the topics (the fleet scenario sets its own).
pub const CONSUMERS: usize = 2;

/// The effects table: one row per applied event, stamped when the effect was written, with
/// the millisecond Redis added the entry (its stream id's first part).
pub const EFFECTS_SQL: &str = "CREATE TABLE IF NOT EXISTS bench_effects (
    event_id uuid NOT NULL,
    created_at timestamptz NOT NULL,
    added_ms bigint NOT NULL,
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
    /// The environment's inbox consumers ([`CONSUMERS`], or its fleet's) of every bench topic
    /// of `scratch`, on a runtime of two worker threads; each effect's commit time goes into
    /// `applied`.
    pub fn start(scratch: &Scratch, env: &BenchEnv, applied: Moments) -> anyhow::Result<Consumers> {
        let count = env.fleet.map_or(CONSUMERS, |f| f.consumers);
        let names = (0..count).map(|c| format!("bench-{c}")).collect();
        Consumers::start_named(scratch, env, applied, names)
    }

    /// Consumers of these names, as [`Consumers::start`].
    pub fn start_named(
        scratch: &Scratch,
        env: &BenchEnv,
        applied: Moments,
        names: Vec<String>,
    ) -> anyhow::Result<Consumers> {
        anyhow::ensure!(
            !env.cluster && env.redis_ca.is_none(),
            "the end-to-end scenario runs on a plain single Redis"
        );
        let (stop, stopped) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let (url, redis_url, prefix, park_keys) = (
            scratch.url.clone(),
            env.redis_url.clone(),
            scratch.prefix.clone(),
            env.park_keys,
        );
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let run = consume(
                    &url, &redis_url, &prefix, park_keys, &names, stopped, applied,
                );
                if let Err(e) = run.await {
                    tracing::error!("bench consumers: {e:#}");
                }
            })
        });
        Ok(Consumers {
            stop,
            thread: Some(thread),
        })
    }

    /// Waits (a minute at most) until `total` effects are committed, stops the consumers, and
    /// prints the consumers' share of the latency.
    pub async fn settle(self, scratch: &Scratch, total: u64) -> anyhow::Result<()> {
        let mut conn = scratch.conn().await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while effects(&mut conn).await? < total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(self);
        print_stream_to_effect(&mut conn).await
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
    park_keys: bool,
    names: &[String],
    stopped: watch::Receiver<bool>,
    applied: Moments,
) -> anyhow::Result<()> {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(url);
    // No ping before each checkout: the transaction itself finds a dead connection.
    let pool = bb8::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .build(manager)
        .await?;
    let consumers = names
        .iter()
        .map(|name| {
            let config = ConsumerConfig::new(redis_url, "bench.topic0", GROUP)
                .topics((0..TOPICS).map(|t| format!("bench.topic{t}")))
                .stream_prefix(prefix)
                .consumer(name)
                .park_keys(park_keys)
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
        let (pool, applied) = (pool.clone(), applied.clone());
        consumer.run(
            Batches(move |entries: Vec<Entry>| {
                let (pool, applied) = (pool.clone(), applied.clone());
                async move {
                    let mut conn = pool.get().await.map_err(HandlerError::outage)?;
                    // On partitioned topics (the fleet scenario): the fences first, as the
                    // `Inbox` wrapper does.
                    inbox::raise_fences(&mut conn, GROUP, &entries)
                        .await
                        .map_err(|e| HandlerError::retry(e.to_string()))?;
                    inbox::apply_batch_once(&mut conn, GROUP, &entries, &apply_effects)
                        .await
                        .map_err(|e| HandlerError::retry(e.to_string()))?;
                    let now = Instant::now();
                    if let Ok(mut applied) = applied.lock() {
                        applied.extend(entries.iter().map(|e| (e.id, now)));
                    }
                    Ok::<(), HandlerError>(())
                }
            }),
            shutdown,
        )
    });
    futures::future::join_all(runs).await;
    Ok(())
}

/// The effect: one `bench_effects` row per entry, in one statement.
fn apply_effects<'r>(
    conn: &'r mut AsyncPgConnection,
    entries: &'r [Entry],
) -> futures::future::BoxFuture<'r, Result<(), diesel::result::Error>> {
    let ids: Vec<uuid::Uuid> = entries.iter().map(|e| e.id).collect();
    let created: Vec<chrono::DateTime<chrono::Utc>> =
        entries.iter().map(|e| e.created_at).collect();
    let added: Vec<i64> = entries.iter().map(|e| added_ms(&e.stream_id)).collect();
    Box::pin(async move {
        prepared(
            diesel::sql_query(
                "INSERT INTO bench_effects (event_id, created_at, added_ms)
                 SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::int8[])",
            )
            .bind::<Array<SqlUuid>, _>(ids)
            .bind::<Array<Timestamptz>, _>(created)
            .bind::<Array<BigInt>, _>(added),
        )
        .execute(conn)
        .await
        .map(|_| ())
    })
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
            let consumers = Consumers::start(scratch, env, Moments::default())?;
            let relay = harness::RelayProcess::start(scratch, env, "bench-e2e", &extra)?;
            let deadline = started + Duration::from_secs(600);
            // Timed from the first effects to the last, as the relay-only drain is from its
            // first entries: starting the processes is not draining.
            let mut first = None;
            loop {
                let applied = effects(&mut conn).await?;
                if applied > 0 && first.is_none() {
                    first = Some(FirstEntries {
                        seconds: started.elapsed().as_secs_f64(),
                        events: applied,
                    });
                }
                if applied >= n {
                    break;
                }
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
                first,
            })
        },
    )
    .await
}

/// The millisecond part of a stream id (`ms-seq`): when Redis added the entry.
fn added_ms(stream_id: &str) -> i64 {
    stream_id
        .split_once('-')
        .and_then(|(ms, _)| ms.parse().ok())
        .unwrap_or(0)
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

/// Prints, from the effects table, how long after its entry's arrival in the stream each
/// effect was written (the consumer's share of the end-to-end latency) and how long after its
/// event's `created_at` (the producer transaction's start, so a little more than from its
/// commit), ms. Redis's and Postgres's clocks are this machine's one clock.
pub async fn print_stream_to_effect(conn: &mut AsyncPgConnection) -> anyhow::Result<()> {
    for (what, since) in [
        ("stream to effect", "added_ms"),
        (
            "created_at to effect",
            "extract(epoch FROM created_at)::float8 * 1000",
        ),
    ] {
        let ms = Percentiles::from_ms(effect_delays(conn, since).await?)?;
        eprintln!(
            "bench: end to end: {what} p50 {:.1} ms, p99 {:.1} ms",
            ms.ms(50.0).unwrap_or(0.0),
            ms.ms(99.0).unwrap_or(0.0)
        );
    }
    Ok(())
}

/// Every effect's `applied_at` minus `since` (an SQL expression in ms).
async fn effect_delays(conn: &mut AsyncPgConnection, since: &str) -> anyhow::Result<Vec<f64>> {
    #[derive(diesel::QueryableByName)]
    struct Ms {
        #[diesel(sql_type = diesel::sql_types::Double)]
        ms: f64,
    }
    let rows: Vec<Ms> = diesel::sql_query(format!(
        "SELECT greatest(extract(epoch FROM applied_at)::float8 * 1000 - {since}, 0) AS ms
         FROM bench_effects"
    ))
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.ms).collect())
}

/// Creates the effects table in the scratch database.
pub async fn create_effects(conn: &mut AsyncPgConnection) -> anyhow::Result<()> {
    conn.batch_execute(EFFECTS_SQL).await?;
    Ok(())
}
