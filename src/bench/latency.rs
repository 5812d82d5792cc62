//! Steady-rate latency: producers commit one event per transaction at a fixed rate while a
//! consumer XREADs the streams; latency is from the producer's commit returning to the
//! consumer receiving the entry, both measured on this process's monotonic clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::{Text, Uuid as SqlUuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use redis::streams::{StreamReadOptions, StreamReadReply};
use uuid::Uuid;

use super::harness::{self, BenchEnv, RelayProcess, Scratch, TOPICS};
use super::Figure;
use outbox_core::prepared::prepared;

/// Percentiles of one steady run.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    /// Events committed.
    pub events: u64,
    /// The commit rate the producers achieved (below the target when Postgres could not
    /// commit that many single-event transactions).
    pub rate: f64,
    /// Sorted latencies, ms.
    pub samples: Vec<f64>,
    /// Relay CPU seconds.
    pub cpu: f64,
    /// Relay peak RSS, MB.
    pub rss: f64,
    /// Machine and Redis CPU while producing.
    pub load: super::machine::Load,
    /// Percentiles per window of commit time, when asked for (a long run's drift).
    pub windows: Vec<WindowFigure>,
    /// The outbox table at the end, when asked for (what a long run left behind).
    pub table: Option<TableFigure>,
}

/// Latency of the events committed within one window of a steady run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WindowFigure {
    /// Start of the window, seconds after the producers started.
    pub from_s: u64,
    /// Events committed in it.
    pub events: u64,
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Maximum, ms.
    pub max_ms: f64,
}

/// The outbox table after a steady run: its size, the dead tuples waiting for a vacuum, how
/// often autovacuum ran, and each index's size.
#[derive(Debug, Clone, Default, serde::Serialize, QueryableByName)]
pub struct TableFigure {
    /// Heap bytes.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub heap_bytes: i64,
    /// Live rows (statistics).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub live_rows: i64,
    /// Dead row versions not yet vacuumed (statistics).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub dead_rows: i64,
    /// Autovacuum runs on the table during the run.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub autovacuums: i64,
    /// Explicit VACUUMs of the table during the run (`--soak-vacuum`).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub vacuums: i64,
    /// `index=bytes` for each index, comma separated.
    #[diesel(sql_type = Text)]
    pub indexes: String,
}

/// Reads [`TableFigure`] for the scratch database's outbox.
async fn table_figure(conn: &mut AsyncPgConnection) -> anyhow::Result<TableFigure> {
    Ok(diesel::sql_query(
        "SELECT pg_relation_size('outbox') AS heap_bytes,
                s.n_live_tup AS live_rows, s.n_dead_tup AS dead_rows,
                s.autovacuum_count AS autovacuums, s.vacuum_count AS vacuums,
                (SELECT string_agg(c.relname || '=' || pg_relation_size(c.oid), ', '
                                   ORDER BY c.relname)
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE i.indrelid = 'outbox'::regclass) AS indexes
         FROM pg_stat_user_tables s WHERE s.relname = 'outbox'",
    )
    .get_result(conn)
    .await?)
}

/// Splits (commit time, latency) samples into windows of `width` from the start.
fn windows(mut timed: Vec<(Duration, f64)>, width: Duration) -> Vec<WindowFigure> {
    let width = width.as_secs().max(1);
    timed.sort_by_key(|t| t.0);
    let mut out: Vec<WindowFigure> = Vec::new();
    let mut i = 0;
    while i < timed.len() {
        let from_s = timed[i].0.as_secs() / width * width;
        let mut batch: Vec<f64> = Vec::new();
        while i < timed.len() && timed[i].0.as_secs() < from_s + width {
            batch.push(timed[i].1);
            i += 1;
        }
        batch.sort_by(|a, b| a.total_cmp(b));
        out.push(WindowFigure {
            from_s,
            events: batch.len() as u64,
            p50_ms: percentile(&batch, 50.0).unwrap_or(0.0),
            p99_ms: percentile(&batch, 99.0).unwrap_or(0.0),
            max_ms: batch.last().copied().unwrap_or(0.0),
        });
    }
    out
}

/// The value at percentile `p` (0-100) of sorted samples; `None` when there are none.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted.get(rank.min(sorted.len() - 1)).copied()
}

impl Latency {
    /// As a figure.
    pub fn figure(&self, name: &str) -> Figure {
        Figure {
            scenario: name.into(),
            events: self.events,
            events_per_sec: Some(self.rate),
            p50_ms: percentile(&self.samples, 50.0),
            p99_ms: percentile(&self.samples, 99.0),
            p999_ms: percentile(&self.samples, 99.9),
            max_ms: self.samples.last().copied(),
            cpu_seconds: Some(self.cpu),
            peak_rss_mb: Some(self.rss),
            redis_cpu_seconds: self.load.redis_cpu,
            busy_cores: self.load.busy_cores,
            windows: self.windows.clone(),
            table: self.table.clone(),
            ..Figure::default()
        }
    }
}

#[derive(QueryableByName)]
struct Inserted {
    #[diesel(sql_type = SqlUuid)]
    id: Uuid,
}

/// How the relay learns of new events in a steady run.
#[derive(Debug, Clone, Copy)]
pub enum Wakeup {
    /// The outbox trigger's NOTIFY, quieted while the relay claims continuously (the
    /// default configuration).
    Notify,
    /// NOTIFY on every commit (`relay.quiet_above = 0`).
    NotifyAlways,
    /// `outbox.notify = 'off'` for the database, and the relay polls at this interval
    /// (`relay.poll_only`): what docs/operations.md recommends where producers commit many small
    /// transactions concurrently, since notifying commits are serialized by Postgres.
    Poll(Duration),
}

impl Wakeup {
    /// The scenario name of a steady run at `rate`.
    pub fn scenario(&self, rate: u64) -> String {
        match self {
            Wakeup::Notify => format!("latency at {rate}/s"),
            Wakeup::NotifyAlways => format!("latency at {rate}/s, NOTIFY always"),
            Wakeup::Poll(every) => format!(
                "latency at {rate}/s, poll {}",
                humantime::format_duration(*every)
            ),
        }
    }
}

/// Where a steady run's latency ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The event's entry is in its stream (read with XREAD).
    Stream,
    /// A consumer of the `outbox-consumer` library committed the event's effect with its
    /// inbox row (see `endtoend`).
    Effect,
}

/// What a long steady run adds to a short one.
#[derive(Debug, Clone, Copy)]
pub struct Soak {
    /// Percentiles are reported per window of this length.
    pub window: Duration,
    /// `VACUUM (ANALYZE) outbox` at this interval while producing: what autovacuum would do
    /// on a server where it is on (this machine's CI configuration turns it off).
    pub vacuum_every: Option<Duration>,
    /// The relay deletes rows as it publishes them (`retention.published_for = 0s`).
    pub delete: bool,
}

/// Runs one steady rate for `duration`; with `soak`, also reports percentiles per window and
/// the table's state at the end.
pub async fn steady(
    env: &BenchEnv,
    rate: u64,
    duration: Duration,
    wakeup: Wakeup,
    soak: Option<Soak>,
    until: Until,
) -> anyhow::Result<Latency> {
    let scratch = Scratch::new(env).await?;
    let result = steady_in(&scratch, env, rate, duration, wakeup, soak, until).await;
    scratch.cleanup().await;
    result
}

async fn steady_in(
    scratch: &Scratch,
    env: &BenchEnv,
    rate: u64,
    duration: Duration,
    wakeup: Wakeup,
    soak: Option<Soak>,
    until: Until,
) -> anyhow::Result<Latency> {
    let poll_ms;
    let mut relay_env: Vec<(&str, &str)> = Vec::new();
    if let Wakeup::Poll(every) = wakeup {
        let mut conn = scratch.conn().await?;
        conn.batch_execute(&format!(
            "ALTER DATABASE {} SET outbox.notify = 'off'",
            scratch.name
        ))
        .await?;
        poll_ms = format!("{}ms", every.as_millis().max(1));
        relay_env.push(("OUTBOX__RELAY__POLL_INTERVAL", &poll_ms));
        relay_env.push(("OUTBOX__RELAY__POLL_ONLY", "true"));
    }
    if let Wakeup::NotifyAlways = wakeup {
        relay_env.push(("OUTBOX__RELAY__QUIET_ABOVE", "0"));
    }
    if soak.as_ref().is_some_and(|s| s.delete) {
        relay_env.push(("OUTBOX__RETENTION__PUBLISHED_FOR", "0s"));
    }
    let groups = super::endtoend::groups_setting();
    // When each event arrived: read from its stream, or its effect's commit returned.
    let received: Arc<Mutex<HashMap<Uuid, Instant>>> = Arc::default();
    let consumers = match until {
        Until::Stream => None,
        Until::Effect => {
            super::endtoend::create_effects(&mut scratch.conn().await?).await?;
            relay_env.push(("OUTBOX__GROUPS", &groups));
            Some(super::endtoend::Consumers::start(
                scratch,
                env,
                received.clone(),
            )?)
        }
    };
    let relay = RelayProcess::start(scratch, env, "bench-latency", &relay_env)?;
    // Let the relay connect and LISTEN before the clock starts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let committed: Arc<Mutex<HashMap<Uuid, Instant>>> = Arc::default();
    let producing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let total = rate * duration.as_secs().max(1);

    let vacuumer = soak.and_then(|s| s.vacuum_every).map(|every| {
        let producing = producing.clone();
        let url = scratch.url.clone();
        tokio::spawn(async move {
            let mut conn = harness::pg(&url).await?;
            loop {
                tokio::time::sleep(every).await;
                // Spelled out: diesel's `load` is in scope too.
                if !std::sync::atomic::AtomicBool::load(
                    &producing,
                    std::sync::atomic::Ordering::SeqCst,
                ) {
                    return Ok::<_, anyhow::Error>(());
                }
                conn.batch_execute("VACUUM (ANALYZE) outbox").await?;
            }
        })
    });
    let consumer = (until == Until::Stream).then(|| {
        let received = received.clone();
        let producing = producing.clone();
        let streams: Vec<String> = (0..TOPICS).map(|t| scratch.stream(t)).collect();
        let env = env.clone();
        tokio::spawn(async move {
            let mut redis = env.redis().await?;
            let mut ids: Vec<String> = vec!["0-0".to_string(); streams.len()];
            let opts = StreamReadOptions::default().block(500).count(1000);
            // Stop when everything arrived, or 10 s after the producers finished and
            // nothing more came (the caller then reports what is missing).
            let mut last_progress = Instant::now();
            loop {
                let got = received.lock().map(|r| r.len()).unwrap_or(0) as u64;
                if got >= total {
                    break;
                }
                if !std::sync::atomic::AtomicBool::load(
                    &producing,
                    std::sync::atomic::Ordering::SeqCst,
                ) && last_progress.elapsed() > Duration::from_secs(10)
                {
                    break;
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
            Ok::<_, anyhow::Error>(())
        })
    });

    // Producers: enough connections that commits (an fsync each) keep up with the rate.
    let producers = ((rate / 100) as usize).clamp(2, 64);
    let mut meter_redis = env.redis().await?;
    let meter = super::machine::Meter::start(&mut meter_redis).await;
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tasks = Vec::new();
    for p in 0..producers {
        let url = scratch.url.clone();
        let committed = committed.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = harness::pg(&url).await?;
            let mut i = p as u64;
            while i < total {
                let due = started + interval.mul_f64(i as f64);
                tokio::time::sleep_until(due.into()).await;
                let topic = format!("bench.topic{}", i % TOPICS);
                let key = (i % 2 == 0).then(|| format!("key-{}", i % 1000));
                // Prepared once per connection, as an application's driver would: a
                // statement parsed anew on every run costs each commit a round trip more.
                let row: Inserted = prepared(
                    diesel::sql_query(
                        "INSERT INTO outbox (topic, payload, partition_key)
                         VALUES ($1, jsonb_build_object('n', $2::bigint, 'pad', repeat('x', 220)), $3)
                         RETURNING id",
                    )
                    .bind::<Text, _>(topic)
                    .bind::<diesel::sql_types::BigInt, _>(i as i64)
                    .bind::<diesel::sql_types::Nullable<Text>, _>(key),
                )
                .get_result(&mut conn)
                .await?;
                let at = Instant::now();
                if let Ok(mut c) = committed.lock() {
                    c.insert(row.id, at);
                }
                i += producers as u64;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let produced_in = started.elapsed();
    let load = meter.stop(&mut meter_redis).await;
    producing.store(false, std::sync::atomic::Ordering::SeqCst);
    if let Some(consumer) = consumer {
        consumer.await??;
    }
    if let Some(vacuumer) = vacuumer {
        vacuumer.await??;
    }
    let table = match soak {
        Some(_) => Some(table_figure(&mut scratch.conn().await?).await?),
        None => None,
    };
    if let Some(consumers) = consumers {
        let mut conn = scratch.conn().await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while super::endtoend::effects(&mut conn).await? < total && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(consumers);
        super::endtoend::print_stream_to_effect(&mut conn).await?;
    }
    let (cpu, rss) = relay.stop();
    let committed = committed.lock().map(|c| c.clone()).unwrap_or_default();
    let received = received.lock().map(|r| r.clone()).unwrap_or_default();
    let mut samples: Vec<f64> = committed
        .iter()
        .filter_map(|(id, at)| {
            received
                .get(id)
                // An entry can arrive before the producer's commit call returns: count 0.
                .map(|got| got.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    anyhow::ensure!(
        samples.len() == committed.len(),
        "{} events committed, {} arrived ({:?})",
        committed.len(),
        samples.len(),
        until
    );
    let windows = match soak {
        Some(Soak { window: width, .. }) => windows(
            committed
                .iter()
                .filter_map(|(id, at)| {
                    let got = received.get(id)?;
                    let ms = got.saturating_duration_since(*at).as_secs_f64() * 1000.0;
                    Some((at.saturating_duration_since(started), ms))
                })
                .collect(),
            width,
        ),
        None => Vec::new(),
    };
    samples.sort_by(|a, b| a.total_cmp(b));
    Ok(Latency {
        windows,
        table,
        events: committed.len() as u64,
        rate: committed.len() as f64 / produced_in.as_secs_f64().max(1e-9),
        samples,
        cpu,
        rss,
        load,
    })
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn samples_fall_into_the_window_of_their_commit() {
        let s = Duration::from_secs;
        let timed = vec![
            (s(61), 9.0),
            (s(1), 1.0),
            (s(59), 3.0),
            (s(130), 5.0),
            (s(0), 2.0),
        ];
        let w = windows(timed, s(60));
        let summary: Vec<(u64, u64, f64)> =
            w.iter().map(|w| (w.from_s, w.events, w.max_ms)).collect();
        assert_eq!(summary, vec![(0, 3, 3.0), (60, 1, 9.0), (120, 1, 5.0)]);
        assert_eq!(w[0].p50_ms, 2.0);
    }
}
