//! What a steady run sends and reads besides the relay: producers committing one event per
//! transaction at a fixed rate, a reader noting when each entry arrives in its stream, and the
//! soak's periodic VACUUM. Every moment is taken on this process's monotonic clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Nullable, Text, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use outbox_core::prepared::prepared;
use redis::streams::{StreamReadOptions, StreamReadReply};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::harness::{self, BenchEnv, Scratch, TOPICS};

/// When each event was seen (committed, or arrived), by id.
pub type Moments = Arc<Mutex<HashMap<Uuid, Instant>>>;

/// Whether the producers are still at work, for the tasks that end after them.
#[derive(Debug, Clone)]
pub struct Producing(Arc<AtomicBool>);

impl Producing {
    /// The producers are about to start.
    pub fn start() -> Producing {
        Producing(Arc::new(AtomicBool::new(true)))
    }

    /// They are done (or failed).
    pub fn stop(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// True while they are at work.
    pub fn on(&self) -> bool {
        // Spelled out: diesel-async's `RunQueryDsl::load` (in scope here) is implemented for
        // every type, the Arc included, and method lookup would pick it first.
        AtomicBool::load(&self.0, Ordering::SeqCst)
    }
}

/// What the producers did.
#[derive(Debug, Clone)]
pub struct Produced {
    /// When each event's commit returned.
    pub committed: HashMap<Uuid, Instant>,
    /// When the first producer started.
    pub started: Instant,
    /// How long producing took.
    pub took: Duration,
}

#[derive(QueryableByName)]
struct Inserted {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
}

/// Commits `total` events to the database at `url`, one per transaction, at `rate` a second
/// (above 0), on enough connections that the commits (an fsync each) keep up with the rate.
pub async fn produce(url: &str, rate: u64, total: u64) -> anyhow::Result<Produced> {
    let producers = (rate / 100).clamp(2, 64);
    let committed = Moments::default();
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let tasks: Vec<_> = (0..producers)
        .map(|first| {
            let lane = Lane {
                first,
                step: producers,
                total,
                started,
                interval,
            };
            tokio::spawn(produce_lane(url.to_string(), lane, committed.clone()))
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let took = started.elapsed();
    let committed = committed.lock().map(|c| c.clone()).unwrap_or_default();
    Ok(Produced {
        committed,
        started,
        took,
    })
}

/// One producer's share: events `first`, `first + step`, ... below `total`, event `i` due
/// at `started + i * interval`.
struct Lane {
    first: u64,
    step: u64,
    total: u64,
    started: Instant,
    interval: Duration,
}

async fn produce_lane(url: String, lane: Lane, committed: Moments) -> anyhow::Result<()> {
    let mut conn = harness::pg(&url).await?;
    let mut i = lane.first;
    while i < lane.total {
        let due = lane.started + lane.interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let topic = format!("bench.topic{}", i % TOPICS);
        let key = i.is_multiple_of(2).then(|| format!("key-{}", i % 1000));
        // Prepared once per connection, as an application's driver would: a statement
        // parsed anew on every run costs each commit a round trip more.
        let row: Inserted = prepared(
            diesel::sql_query(
                "INSERT INTO outbox (topic, payload, partition_key)
                 VALUES ($1, jsonb_build_object('n', $2::bigint, 'pad', repeat('x', 220)), $3)
                 RETURNING id",
            )
            .bind::<Text, _>(topic)
            .bind::<BigInt, _>(i as i64)
            .bind::<Nullable<Text>, _>(key),
        )
        .get_result(&mut conn)
        .await?;
        let at = Instant::now();
        if let Ok(mut c) = committed.lock() {
            c.insert(row.id, at);
        }
        i += lane.step;
    }
    Ok(())
}

/// Reads every workload stream of `scratch` from its start, noting in `received` when each
/// event's entry arrived. Ends when all `total` arrived, or 10 s after the producers stopped
/// with nothing more coming (the caller then reports what is missing).
pub fn read_streams(
    scratch: &Scratch,
    env: &BenchEnv,
    received: Moments,
    producing: Producing,
    total: u64,
) -> JoinHandle<anyhow::Result<()>> {
    let streams: Vec<String> = (0..TOPICS).map(|t| scratch.stream(t)).collect();
    let env = env.clone();
    tokio::spawn(async move {
        let mut redis = env.redis().await?;
        let mut ids: Vec<String> = vec!["0-0".to_string(); streams.len()];
        let opts = StreamReadOptions::default().block(500).count(1000);
        let mut last_progress = Instant::now();
        loop {
            let got = received.lock().map(|r| r.len()).unwrap_or(0) as u64;
            if got >= total
                || (!producing.on() && last_progress.elapsed() > Duration::from_secs(10))
            {
                return Ok(());
            }
            let reply: Option<StreamReadReply> = redis::cmd("XREAD")
                .arg(&opts)
                .arg("STREAMS")
                .arg(&streams)
                .arg(&ids)
                .query_async(&mut redis)
                .await?;
            let now = Instant::now();
            let Some(reply) = reply else { continue };
            last_progress = now;
            note_arrivals(reply, &streams, &mut ids, &received, now);
        }
    })
}

/// Notes each entry's event as arrived at `now`, and moves each stream's read position past
/// what it returned.
fn note_arrivals(
    reply: StreamReadReply,
    streams: &[String],
    ids: &mut [String],
    received: &Moments,
    now: Instant,
) {
    for key in reply.keys {
        let slot = streams.iter().position(|s| *s == key.key).unwrap_or(0);
        for entry in key.ids {
            ids[slot] = entry.id.clone();
            let id: Option<String> = entry.get("id");
            if let Some(id) = id.and_then(|s| Uuid::parse_str(&s).ok()) {
                if let Ok(mut r) = received.lock() {
                    r.insert(id, now);
                }
            }
        }
    }
}

/// `VACUUM (ANALYZE) outbox` in the database at `url` every `every` while the producers
/// are at work.
pub fn vacuum_while(
    url: &str,
    every: Duration,
    producing: Producing,
) -> JoinHandle<anyhow::Result<()>> {
    let url = url.to_string();
    tokio::spawn(async move {
        let mut conn = harness::pg(&url).await?;
        loop {
            tokio::time::sleep(every).await;
            if !producing.on() {
                return Ok(());
            }
            conn.batch_execute("VACUUM (ANALYZE) outbox").await?;
        }
    })
}
