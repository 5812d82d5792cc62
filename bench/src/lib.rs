//! outbox-bench: the one honest way to measure outbox-relay's speed. Each scenario runs in a
//! fresh database and stream prefix on the local Postgres and Redis, against real relay
//! processes (the `outbox-relay` binary, `run`), and prints figures; nothing here asserts a
//! time.
//!
//! Scenarios: drain (keep rows / delete mode), steady latency at fixed rates, replicas 1-3,
//! a single hot key, the drain over TLS and on a local three-master Redis Cluster, end to end
//! (producer commit to an inbox consumer's committed effect: a drain and a steady rate), and
//! in the same run two references: the seed article's algorithm (10 rows per transaction, one
//! XADD and one UPDATE per event) and the ceiling (the relay's own SQL with the Redis step
//! removed). The adoption scenario drains a backlog written into an adopted Debezium-layout
//! table beside the native one, and times a producer's inserts with and without adoption;
//! beside it, the same drain with every topic written as CloudEvents, and with `park_on_dead`
//! on every topic.
//!
//! Map of the crate:
//! - [`cli`]: the flags, and the [`BenchOptions`] they make.
//! - [`rounds`]: the throughput scenarios, round by round, each reported by its median round.
//! - [`harness`]: scratch databases and stream prefixes, relay processes, the drain itself.
//! - [`latency`]: steady-rate runs (and the soak), commit to stream or to effect, in stages;
//!   [`traffic`]: their producers, stream reader and VACUUM; [`percentiles`]: their summary.
//! - [`endtoend`]: inbox consumers of the `outbox-consumer` library, the end-to-end drain.
//! - [`fleet`]: the workload in 8 partitions per topic divided by 3 consumers; a join's time.
//! - [`reference`]: the seed article's algorithm and the ceiling.
//! - [`adopted`]: a backlog written into an adopted table (Debezium's layout), and what the
//!   adoption costs a producer's insert.
//! - [`replicated`]: the durability scenario's redis-server and its replica.
//! - [`standbys`]: the standbys scenario's Postgres primary and its streaming standby.
//! - [`tls`]: the TLS scenario's two redis-servers; the local cluster and the CA come from
//!   `outbox-testkit`.
//! - [`machine`]: what a span cost the machine (cores busy, Redis CPU).
//! - [`report`], [`chart`]: the table, the JSON and the SVG chart.

pub mod adopted;
pub mod chart;
pub mod cli;
pub mod endtoend;
pub mod fleet;
pub mod harness;
pub mod latency;
pub mod machine;
pub mod percentiles;
pub mod reference;
pub mod replicated;
pub mod report;
pub mod rounds;
pub mod standbys;
pub mod tls;
pub mod traffic;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use harness::BenchEnv;
use latency::{Steady, Until, Wakeup};
pub use report::{Figure, Report};

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
    /// The `outbox-relay` binary whose processes are measured.
    pub relay_bin: PathBuf,
}

impl BenchOptions {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.starts_with(o.as_str()))
    }
}

/// Runs the selected scenarios, prints the table, writes JSON; returns the report.
pub async fn run(options: BenchOptions) -> anyhow::Result<Report> {
    let env = BenchEnv::new(
        &options.postgres_url,
        &options.redis_url,
        &options.relay_bin,
    );
    let mut report = Report::new(&options);
    rounds::run(&options, &env, &mut report).await;
    if options.wants("latency") {
        steady_rates(&options, &env, &mut report).await;
    }
    if options.wants("endtoend") {
        endtoend_latency(&options, &env, &mut report).await;
    }
    if options.wants("fleet") {
        fleet(&options, &env, &mut report).await;
    }
    if options.wants("standbys") {
        standbys_latency(&options, &env, &mut report).await;
    }
    // Only when named: ten minutes is not for every run.
    if options.only.iter().any(|o| o == "soak") {
        soak(&options, &env, &mut report).await;
    }
    finish(report, &options.out_dir)
}

/// The latency scenarios: every rate with NOTIFY, then always notifying, then polled.
async fn steady_rates(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
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
        let run = Steady::new(rate, options.duration, wakeup, Until::Stream);
        let r = latency::steady(env, run).await;
        report.record(&name, r.map(|l| l.figure(&name)));
    }
}

/// End to end at the first steady rate: producer commit to the inbox consumer's effect.
async fn endtoend_latency(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
    let Some(&rate) = options.rates.first() else {
        return;
    };
    let name = format!("end to end: latency at {rate}/s, inbox");
    let run = Steady::new(rate, options.duration, Wakeup::Notify, Until::Effect);
    let r = latency::steady(env, run).await;
    report.record(&name, r.map(|l| l.figure(&name)));
}

/// The fleet at the first steady rate: producer commit to effect with 3 consumers dividing
/// 8 partitions per topic; then the time a joining consumer takes to get its share.
async fn fleet(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
    let Some(&rate) = options.rates.first() else {
        return;
    };
    let fleet_env = env.with_fleet(fleet::SHAPE);
    let name = format!("fleet: latency at {rate}/s, 8 partitions, 3 consumers");
    let run = Steady::new(rate, options.duration, Wakeup::Notify, Until::Effect);
    let r = latency::steady(&fleet_env, run).await;
    report.record(&name, r.map(|l| l.figure(&name)));
    let name = format!("fleet: a 3rd consumer joins at {rate}/s (s to balance)");
    let r = fleet::join(env, rate, options.duration, &name).await;
    report.record(&name, r);
}

/// At the first steady rate on a Postgres with one standby: without and with
/// `database.wait_standbys = 1`, on the same servers.
async fn standbys_latency(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
    let Some(&rate) = options.rates.first() else {
        return;
    };
    let servers = match standbys::Standbys::start() {
        Ok(servers) => servers,
        Err(e) => {
            let name = format!("standbys: latency at {rate}/s");
            report.record(&name, Err(e.context("postgres with a standby")));
            return;
        }
    };
    for (wait, side) in [(false, "no wait"), (true, "wait_standbys = 1")] {
        let name = format!("standbys: latency at {rate}/s, {side}");
        let run = Steady::new(rate, options.duration, Wakeup::Notify, Until::Stream);
        let r = latency::steady(&servers.env(env, wait), run).await;
        report.record(&name, r.map(|l| l.figure(&name)));
    }
}

/// The soak: one long steady rate, its latency per window and the table's state at its end.
async fn soak(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
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
    let run = Steady::new(rate, options.soak_duration, Wakeup::Notify, Until::Stream).soak(soak);
    let r = latency::steady(env, run).await;
    report.record(&name, r.map(|l| l.figure(&name)));
}

/// Works out the ratios, prints the table, writes the JSON and the chart; fails when a
/// scenario did, after reporting the others.
fn finish(mut report: Report, out_dir: &Path) -> anyhow::Result<Report> {
    report.compare();
    report.print();
    let path = report.write_json(out_dir)?;
    println!("results: {}", path.display());
    anyhow::ensure!(!report.failed(), "some scenarios failed (see above)");
    Ok(report)
}
