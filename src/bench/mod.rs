//! `outbox-relay bench`: the one honest way to measure speed. Each scenario runs in a fresh
//! database and stream prefix on the local Postgres and Redis, against real relay processes
//! (this same binary, `run`), and prints figures; nothing here asserts a time.
//!
//! Scenarios: drain (keep rows / delete mode), steady latency at fixed rates, replicas 1-3,
//! a single hot key, the drain on a local three-master Redis Cluster, end to end (producer commit
//! to an inbox consumer's committed effect: a drain and a steady rate), and in the same run two
//! references: the seed article's algorithm (10 rows per transaction, one XADD and one UPDATE
//! per event) and the ceiling (the relay's own SQL with the Redis step removed).

pub mod certs;
pub mod chart;
pub mod cluster;
pub mod endtoend;
pub mod harness;
pub mod latency;
pub mod machine;
pub mod reference;
pub mod report;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

pub use harness::BenchEnv;
use harness::Drain;
use latency::{Until, Wakeup};
pub use report::{Figure, Report};

/// The ceiling scenario's name.
const CEILING: &str = "ceiling: relay SQL, no Redis";
/// The TLS scenario's two sides.
const TLS_OFF: &str = "tls: off (own Redis, sslmode=disable)";
const TLS_ON: &str = "tls: on (rediss, sslmode=require)";

/// The end-to-end drain's name: producer commit to consumer effect, inbox on.
const E2E_DRAIN: &str = "end to end: drain to inbox consumers";

/// The cluster scenario's name: the keep-rows drain on a local cluster of this many masters.
const CLUSTER: &str = "redis cluster: 3 masters";

/// Masters of the cluster scenario's local cluster.
const CLUSTER_MASTERS: usize = 3;

/// The relay's poll interval in the polled latency scenarios.
pub const POLLED_INTERVAL: Duration = Duration::from_millis(10);

/// The soak run reports its latency per window of this length.
pub const SOAK_WINDOW: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events preloaded for the drain scenarios.
    pub events: u64,
    /// Steady rates (events/s) for the latency scenario.
    pub rates: Vec<u64>,
    /// Steady rates measured again with NOTIFY switched off and the relay polling every
    /// [`POLLED_INTERVAL`].
    pub polled_rates: Vec<u64>,
    /// Steady rates measured again with producers always notifying (no quieting).
    pub notify_always_rates: Vec<u64>,
    /// How long each steady rate runs.
    pub duration: Duration,
    /// Published rows waiting for retention in the bloat scenario.
    pub bloat_rows: u64,
    /// Steady rate of the soak run (`--only soak`).
    pub soak_rate: u64,
    /// How long the soak run lasts.
    pub soak_duration: Duration,
    /// VACUUM the outbox at this interval during the soak run.
    pub soak_vacuum: Option<Duration>,
    /// The soak's relay deletes rows as it publishes them.
    pub soak_delete: bool,
    /// Rounds of the throughput scenarios (each reports its median round).
    pub repeat: u32,
    /// Scenario names to run (empty: all).
    pub only: Vec<String>,
    /// Where JSON results go.
    pub out_dir: PathBuf,
    /// Admin URL of the local Postgres (databases are created next to it).
    pub postgres_url: String,
    /// Redis URL.
    pub redis_url: String,
}

impl BenchOptions {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.starts_with(o.as_str()))
    }
}

fn add_run(
    runs: &mut Vec<(String, Vec<anyhow::Result<Drain>>)>,
    name: &str,
    result: anyhow::Result<Drain>,
) {
    match runs.iter_mut().find(|(n, _)| n == name) {
        Some((_, results)) => results.push(result),
        None => runs.push((name.to_string(), vec![result])),
    }
}

/// The median round by events/s, and every round's events/s; a failed round fails the
/// scenario (a failure is never averaged away).
fn median(results: Vec<anyhow::Result<Drain>>) -> anyhow::Result<(Drain, Vec<f64>)> {
    let mut drains = results
        .into_iter()
        .collect::<anyhow::Result<Vec<Drain>>>()?;
    anyhow::ensure!(!drains.is_empty(), "no round ran");
    let rate = |d: &Drain| d.rate();
    let all: Vec<f64> = drains.iter().map(rate).collect();
    drains.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let middle = drains.swap_remove(drains.len() / 2);
    Ok((middle, all))
}

/// Runs the selected scenarios, prints the table, writes JSON; returns the report.
pub async fn run(options: BenchOptions) -> anyhow::Result<Report> {
    let env = BenchEnv::new(&options.postgres_url, &options.redis_url);
    let mut report = Report::new(&options);
    let n = options.events;

    // Rounds, not repeats of each scenario in a row: a slow minute of the machine then
    // falls on every scenario alike, and the ratios between them stay fair.
    let mut runs: Vec<(String, Vec<anyhow::Result<Drain>>)> = Vec::new();
    let tls = match options.wants("tls") {
        true => Some(tls::TlsServers::start()),
        false => None,
    };
    // One local cluster (fresh redis-servers, no persistence, like the bench's Redis) for
    // every round; each drain has a stream prefix of its own.
    let local = options.wants("cluster").then(|| {
        cluster::LocalCluster::start(CLUSTER_MASTERS, cluster::Persistence::None)
            .map(|c| (env.on_cluster(&c.seeds()), c))
    });
    let on_cluster = async |n| match &local {
        Some(Ok((cluster_env, _))) => {
            harness::drain(cluster_env, n, 1, harness::Shape::Mixed, &[]).await
        }
        Some(Err(e)) => Err(anyhow::anyhow!("no local cluster: {e}")),
        None => Err(anyhow::anyhow!("cluster scenario not selected")),
    };
    for round in 0..options.repeat.max(1) {
        // The ceiling runs right beside the keep-rows drain, so each round's ratio of the two
        // compares the same minute of a shared machine (its speed drifts from one minute to
        // the next); first in every other round, so neither is always the one that
        // runs on a machine left warm (or busy) by the other.
        // The cluster drain too, against this same single-node drain.
        let ceiling_first = round % 2 == 1;
        if options.wants("ceiling") && ceiling_first {
            add_run(&mut runs, CEILING, reference::ceiling(&env, n).await);
        }
        if options.wants("cluster") && ceiling_first {
            add_run(&mut runs, CLUSTER, on_cluster(n).await);
        }
        if options.wants("drain") || options.wants("cluster") || options.wants("endtoend") {
            let r = harness::drain(&env, n, 1, harness::Shape::Mixed, &[]).await;
            add_run(&mut runs, "drain (keep rows)", r);
        }
        if options.wants("endtoend") {
            add_run(&mut runs, E2E_DRAIN, endtoend::drain(&env, n).await);
        }
        if options.wants("ceiling") && !ceiling_first {
            add_run(&mut runs, CEILING, reference::ceiling(&env, n).await);
        }
        if options.wants("cluster") && !ceiling_first {
            add_run(&mut runs, CLUSTER, on_cluster(n).await);
        }
        if options.wants("drain") {
            let delete = [("OUTBOX__RETENTION__PUBLISHED_FOR", "0s")];
            let r = harness::drain(&env, n, 1, harness::Shape::Mixed, &delete).await;
            add_run(&mut runs, "drain (delete mode)", r);
        }
        if options.wants("replicas") {
            for replicas in [1, 2, 3] {
                let r = harness::drain(&env, n, replicas, harness::Shape::Mixed, &[]).await;
                add_run(&mut runs, &format!("replicas: {replicas}"), r);
            }
        }
        if options.wants("bloat") {
            let shape = harness::Shape::Bloated(options.bloat_rows);
            let r = harness::drain(&env, n, 1, shape, &[]).await;
            let name = format!("bloat: behind {} published rows", options.bloat_rows);
            add_run(&mut runs, &name, r);
        }
        if options.wants("hotkey") {
            let r = harness::drain(&env, n, 1, harness::Shape::HotKey, &[]).await;
            add_run(&mut runs, "hot key (one partition key)", r);
        }
        if let Some(servers) = &tls {
            // Both sides in every round, in alternating order, like the ceiling's pair.
            let sides = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for on in sides {
                let r = match servers {
                    Ok(servers) => match servers.env(&env, on) {
                        Ok(side) => harness::drain(&side, n, 1, harness::Shape::Mixed, &[]).await,
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(anyhow::anyhow!("tls servers: {e:#}")),
                };
                add_run(&mut runs, if on { TLS_ON } else { TLS_OFF }, r);
            }
        }
        if options.wants("baseline") {
            let r = reference::seed_algorithm(&env, n.min(20_000)).await;
            add_run(&mut runs, "baseline: seed algorithm, indexed", r);
        }
    }
    for (name, results) in runs {
        report.record(
            &name,
            median(results).map(|(d, all)| d.figure(&name).with_runs(all)),
        );
    }
    if options.wants("latency") {
        let notified = options.rates.iter().map(|&r| (r, Wakeup::Notify));
        let polled = options
            .polled_rates
            .iter()
            .map(|&r| (r, Wakeup::Poll(POLLED_INTERVAL)));
        let always = options
            .notify_always_rates
            .iter()
            .map(|&r| (r, Wakeup::NotifyAlways));
        for (rate, wakeup) in notified.chain(always).chain(polled) {
            let name = wakeup.scenario(rate);
            let r =
                latency::steady(&env, rate, options.duration, wakeup, None, Until::Stream).await;
            report.record(&name, r.map(|l| l.figure(&name)));
        }
    }
    if options.wants("endtoend") {
        if let Some(&rate) = options.rates.first() {
            let name = format!("end to end: latency at {rate}/s, inbox");
            let r = latency::steady(
                &env,
                rate,
                options.duration,
                Wakeup::Notify,
                None,
                Until::Effect,
            )
            .await;
            report.record(&name, r.map(|l| l.figure(&name)));
        }
    }
    // Only when named: ten minutes is not for every run.
    if options.only.iter().any(|o| o == "soak") {
        let rate = options.soak_rate;
        let vacuum = options
            .soak_vacuum
            .map(|every| format!(", VACUUM every {}", humantime::format_duration(every)))
            .unwrap_or_default();
        let mode = if options.soak_delete {
            ", delete mode"
        } else {
            ""
        };
        let name = format!(
            "soak at {rate}/s for {}{mode}{vacuum}",
            humantime::format_duration(options.soak_duration)
        );
        let soak = latency::Soak {
            window: SOAK_WINDOW,
            vacuum_every: options.soak_vacuum,
            delete: options.soak_delete,
        };
        let r = latency::steady(
            &env,
            rate,
            options.soak_duration,
            Wakeup::Notify,
            Some(soak),
            Until::Stream,
        )
        .await;
        report.record(&name, r.map(|l| l.figure(&name)));
    }
    report.compare();
    report.print();
    let path = report.write_json(&options.out_dir)?;
    println!("results: {}", path.display());
    anyhow::ensure!(!report.failed(), "some scenarios failed (see above)");
    Ok(report)
}
