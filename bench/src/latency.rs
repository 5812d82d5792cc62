//! Steady-rate latency: producers commit one event per transaction at a fixed rate while a
//! reader XREADs the streams (or inbox consumers apply the events); latency is from the
//! producer's commit returning to the entry's arrival (or the effect's commit), both measured
//! on this process's monotonic clock. The run goes in stages: the relay's settings, the
//! relay and the readers, the producers ([`crate::traffic`]), then the figures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use diesel::sql_types::Text;
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use uuid::Uuid;

use crate::endtoend;
use crate::harness::{BenchEnv, RelayProcess, Scratch};
use crate::machine::{Load, Meter};
use crate::percentiles::Percentiles;
use crate::traffic::{self, Moments, Produced, Producing};
use crate::Figure;

/// Percentiles of one steady run.
#[derive(Debug, Clone)]
pub struct Latency {
    /// Events committed.
    pub events: u64,
    /// The commit rate the producers achieved (below the target when Postgres could not
    /// commit that many single-event transactions).
    pub rate: f64,
    /// Every event's latency.
    pub latencies: Percentiles,
    /// Relay CPU seconds.
    pub cpu: f64,
    /// Relay peak RSS, MB.
    pub rss: f64,
    /// Machine and Redis CPU while producing.
    pub load: Load,
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

/// Splits (commit time, latency ms) samples into windows of `width` from the start.
fn windows(mut timed: Vec<(Duration, f64)>, width: Duration) -> anyhow::Result<Vec<WindowFigure>> {
    let width = width.as_secs().max(1);
    timed.sort_by_key(|t| t.0);
    let mut out: Vec<WindowFigure> = Vec::new();
    for chunk in timed.chunk_by(|a, b| a.0.as_secs() / width == b.0.as_secs() / width) {
        let batch = Percentiles::from_ms(chunk.iter().map(|t| t.1))?;
        out.push(WindowFigure {
            from_s: chunk[0].0.as_secs() / width * width,
            events: batch.len(),
            p50_ms: batch.ms(50.0).unwrap_or(0.0),
            p99_ms: batch.ms(99.0).unwrap_or(0.0),
            max_ms: batch.max_ms().unwrap_or(0.0),
        });
    }
    Ok(out)
}

impl Latency {
    /// As a figure.
    pub fn figure(&self, name: &str) -> Figure {
        Figure {
            scenario: name.into(),
            events: self.events,
            events_per_sec: Some(self.rate),
            p50_ms: self.latencies.ms(50.0),
            p99_ms: self.latencies.ms(99.0),
            p999_ms: self.latencies.ms(99.9),
            max_ms: self.latencies.max_ms(),
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

/// One steady run: its rate, how long it lasts, how the relay wakes up, where latency ends,
/// and, for a soak, what it adds.
#[derive(Debug, Clone, Copy)]
pub struct Steady {
    /// Events/s, above 0.
    pub rate: u64,
    /// How long the producers produce.
    pub duration: Duration,
    /// How the relay learns of new events.
    pub wakeup: Wakeup,
    /// Where latency ends.
    pub until: Until,
    /// Percentiles per window and the table's state at the end, with what a soak does.
    pub soak: Option<Soak>,
}

impl Steady {
    /// `rate` events/s for `duration`, waking the relay by `wakeup`, latency until `until`.
    pub fn new(rate: u64, duration: Duration, wakeup: Wakeup, until: Until) -> Steady {
        Steady {
            rate,
            duration,
            wakeup,
            until,
            soak: None,
        }
    }

    /// As a soak.
    pub fn soak(self, soak: Soak) -> Steady {
        Steady {
            soak: Some(soak),
            ..self
        }
    }
}

/// Runs `run` on a scratch database of its own.
pub async fn steady(env: &BenchEnv, run: Steady) -> anyhow::Result<Latency> {
    anyhow::ensure!(run.rate > 0, "a steady rate must be above 0 events/s");
    let scratch = Scratch::new(env).await?;
    let result = steady_in(&scratch, env, run).await;
    scratch.cleanup().await;
    result
}

async fn steady_in(scratch: &Scratch, env: &BenchEnv, run: Steady) -> anyhow::Result<Latency> {
    let Steady {
        rate,
        duration,
        wakeup,
        until,
        soak,
    } = run;
    let settings = relay_settings(scratch, wakeup, soak, until).await?;
    // When each event arrived: read from its stream, or its effect's commit returned.
    let received = Moments::default();
    let consumers = match until {
        Until::Stream => None,
        Until::Effect => Some(endtoend::Consumers::start(scratch, env, received.clone())?),
    };
    let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let relay = RelayProcess::start(scratch, env, "bench-latency", &settings)?;
    // Let the relay connect and LISTEN before the clock starts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let total = rate * duration.as_secs().max(1);
    let producing = Producing::start();
    let vacuumer = soak
        .and_then(|s| s.vacuum_every)
        .map(|every| traffic::vacuum_while(&scratch.url, every, producing.clone()));
    let reader = (until == Until::Stream)
        .then(|| traffic::read_streams(scratch, env, received.clone(), producing.clone(), total));

    let mut meter_redis = env.redis().await?;
    let meter = Meter::start(&mut meter_redis).await;
    let produced = traffic::produce(&scratch.url, rate, total).await;
    let load = meter.stop(&mut meter_redis).await;
    // Also when a producer failed: the reader and the vacuumer end after the producers.
    producing.stop();
    let produced = produced?;
    if let Some(reader) = reader {
        reader.await??;
    }
    if let Some(vacuumer) = vacuumer {
        vacuumer.await??;
    }
    let table = match soak {
        Some(_) => Some(table_figure(&mut scratch.conn().await?).await?),
        None => None,
    };
    if let Some(consumers) = consumers {
        consumers.settle(scratch, total).await?;
    }
    let (cpu, rss) = relay.stop();
    let received = received.lock().map(|r| r.clone()).unwrap_or_default();
    let timed = latencies(&produced, &received, until)?;
    let windows = match soak {
        Some(soak) => windows(timed.clone(), soak.window)?,
        None => Vec::new(),
    };
    let events = produced.committed.len() as u64;
    Ok(Latency {
        events,
        rate: events as f64 / produced.took.as_secs_f64().max(1e-9),
        latencies: Percentiles::from_ms(timed.iter().map(|t| t.1))?,
        cpu,
        rss,
        load,
        windows,
        table,
    })
}

/// The relay's settings for the run (environment variables); in the scratch database, NOTIFY
/// turned off when the relay polls, and the effects table when effects end the latency.
async fn relay_settings(
    scratch: &Scratch,
    wakeup: Wakeup,
    soak: Option<Soak>,
    until: Until,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let mut settings = Vec::new();
    match wakeup {
        Wakeup::Poll(every) => {
            let mut conn = scratch.conn().await?;
            conn.batch_execute(&format!(
                "ALTER DATABASE {} SET outbox.notify = 'off'",
                scratch.name
            ))
            .await?;
            let interval = format!("{}ms", every.as_millis().max(1));
            settings.push(("OUTBOX__RELAY__POLL_INTERVAL", interval));
            settings.push(("OUTBOX__RELAY__POLL_ONLY", "true".into()));
        }
        Wakeup::NotifyAlways => settings.push(("OUTBOX__RELAY__QUIET_ABOVE", "0".into())),
        Wakeup::Notify => {}
    }
    if soak.is_some_and(|s| s.delete) {
        settings.push(("OUTBOX__RETENTION__PUBLISHED_FOR", "0s".into()));
    }
    if until == Until::Effect {
        endtoend::create_effects(&mut scratch.conn().await?).await?;
        settings.push(("OUTBOX__GROUPS", endtoend::groups_setting()));
    }
    Ok(settings)
}

/// Each committed event's (commit time since the producers started, latency ms); fails when
/// one never arrived.
fn latencies(
    produced: &Produced,
    received: &HashMap<Uuid, Instant>,
    until: Until,
) -> anyhow::Result<Vec<(Duration, f64)>> {
    let timed: Vec<(Duration, f64)> = produced
        .committed
        .iter()
        .filter_map(|(id, at)| {
            let got = received.get(id)?;
            // An entry can arrive before the producer's commit call returns: count 0.
            let ms = got.saturating_duration_since(*at).as_secs_f64() * 1000.0;
            Some((at.saturating_duration_since(produced.started), ms))
        })
        .collect();
    anyhow::ensure!(
        timed.len() == produced.committed.len(),
        "{} events committed, {} arrived ({:?})",
        produced.committed.len(),
        timed.len(),
        until
    );
    Ok(timed)
}

#[cfg(test)]
mod tests {
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
        let w = windows(timed, s(60)).expect("windows");
        let summary: Vec<(u64, u64, f64)> =
            w.iter().map(|w| (w.from_s, w.events, w.max_ms)).collect();
        assert_eq!(summary, vec![(0, 3, 3.0), (60, 1, 9.0), (120, 1, 5.0)]);
        assert_eq!(w[0].p50_ms, 2.0);
    }

    #[test]
    fn latency_runs_from_commit_to_arrival_and_every_event_must_arrive() {
        let started = Instant::now();
        let ms = Duration::from_millis;
        let (early, late) = (Uuid::new_v4(), Uuid::new_v4());
        let produced = Produced {
            committed: HashMap::from([(early, started + ms(10)), (late, started + ms(20))]),
            started,
            took: ms(20),
        };
        // `early` arrived before its commit call returned.
        let mut received = HashMap::from([(early, started + ms(5)), (late, started + ms(27))]);
        let mut timed = latencies(&produced, &received, Until::Stream).expect("latencies");
        timed.sort_by_key(|t| t.0);
        let commits: Vec<Duration> = timed.iter().map(|t| t.0).collect();
        assert_eq!(commits, vec![ms(10), ms(20)]);
        assert_eq!(timed[0].1, 0.0);
        assert!((timed[1].1 - 7.0).abs() < 1e-9, "{timed:?}");
        received.remove(&late);
        let missing = latencies(&produced, &received, Until::Stream).expect_err("one is missing");
        assert!(
            missing
                .to_string()
                .contains("2 events committed, 1 arrived"),
            "{missing}"
        );
    }
}
