//! The command line of `outbox-bench` (clap): the flags `outbox-relay bench` had, the relay's
//! common ones included (`--config`, `--database-url`, `--redis-url`, ... loaded as the relay
//! loads its settings), and `--relay-bin`; and the [`BenchOptions`] they make.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use outbox_relay::cli::CommonArgs;
use outbox_relay::config::{ConfigError, Settings};

use crate::BenchOptions;

/// Where the scratch databases go when no `database.url` is set.
const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Measures outbox-relay's speed on the local Postgres and Redis against real relay processes
/// (a fresh database per scenario; prints a table, writes JSON and an SVG chart).
#[derive(Debug, Parser, Clone)]
#[command(name = "outbox-bench", version, about)]
pub struct BenchArgs {
    /// The common flags (`--database-url` names the Postgres server; each scenario creates
    /// its own database there).
    #[command(flatten)]
    pub common: CommonArgs,
    /// Events preloaded per drain scenario.
    #[arg(long, default_value_t = 200_000)]
    pub events: u64,
    /// Steady producer rates for the latency scenario, events/s.
    #[arg(long, value_delimiter = ',', default_value = "1000,5000", value_parser = rate)]
    pub rates: Vec<u64>,
    /// Steady rates measured again with NOTIFY off and the relay polling every 10 ms.
    #[arg(long, value_delimiter = ',', default_value = "5000", value_parser = rate)]
    pub polled_rates: Vec<u64>,
    /// Steady rates measured again with producers always notifying (`relay.quiet_above = 0`).
    #[arg(long, value_delimiter = ',', default_value = "5000", value_parser = rate)]
    pub notify_always_rates: Vec<u64>,
    /// Duration of each steady rate.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
    /// Published rows the bloat scenario's backlog sits behind.
    #[arg(long, default_value_t = 1_000_000)]
    pub bloat_rows: u64,
    /// Rounds of the throughput scenarios; each reports its median round (a shared machine's
    /// speed drifts from one minute to the next).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Steady rate of the soak run, events/s (run only when `--only` names `soak`).
    #[arg(long, default_value_t = 2000, value_parser = rate)]
    pub soak_rate: u64,
    /// Duration of the soak run: latency per minute and the table's state at its end.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub soak_duration: std::time::Duration,
    /// During the soak run, `VACUUM (ANALYZE) outbox` at this interval: autovacuum's work, on a
    /// server where autovacuum is off (as on this project's CI machine).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub soak_vacuum: Option<std::time::Duration>,
    /// During the soak run, the relay deletes each row as it publishes it
    /// (`retention.published_for = 0s`) instead of keeping it for retention.
    #[arg(long)]
    pub soak_delete: bool,
    /// Only these scenarios (drain, replicas, bloat, hotkey, baseline, ceiling, tls, cluster,
    /// durability, standbys, endtoend, fleet, adopt, cloudevents, parking, latency; `soak` runs
    /// only when named here).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Directory for the JSON results.
    #[arg(long, default_value = "bench-results")]
    pub out: std::path::PathBuf,
    /// The `outbox-relay` binary whose processes are measured (default: the one beside this
    /// binary, which `cargo build --release --bins` puts there).
    #[arg(long, value_name = "FILE")]
    pub relay_bin: Option<PathBuf>,
}

/// A steady rate, events/s: above 0, since the producers space events by its inverse.
fn rate(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(0) => Err("a rate must be above 0 events/s".into()),
        Ok(rate) => Ok(rate),
        Err(e) => Err(e.to_string()),
    }
}

impl BenchArgs {
    /// The settings from the configuration file, the environment and the common flags, as
    /// `outbox-relay` reads them: the bench takes `database.url` and `redis.url` from them.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        Settings::load(
            Settings::default(),
            self.common.config.as_deref(),
            &self.common.overrides(),
        )
    }

    /// What to run; fails when there is no relay binary to run.
    pub fn options(self, settings: &Settings) -> anyhow::Result<BenchOptions> {
        Ok(BenchOptions {
            events: self.events,
            rates: self.rates,
            polled_rates: self.polled_rates,
            notify_always_rates: self.notify_always_rates,
            bloat_rows: self.bloat_rows,
            soak_rate: self.soak_rate,
            soak_duration: self.soak_duration,
            soak_vacuum: self.soak_vacuum,
            soak_delete: self.soak_delete,
            repeat: self.repeat,
            duration: self.duration,
            only: self.only,
            out_dir: self.out,
            postgres_url: settings
                .database
                .url
                .clone()
                .unwrap_or_else(|| DEFAULT_POSTGRES.into()),
            redis_url: settings.redis.url.clone(),
            relay_bin: relay_bin(self.relay_bin)?,
        })
    }
}

/// The relay binary: the one named, or `outbox-relay` beside this executable. Cargo builds a
/// package's own binaries only, so `cargo run -p outbox-bench` alone leaves the relay unbuilt
/// (or stale): the error says how to build it rather than measure nothing.
fn relay_bin(named: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match named {
        Some(path) => path,
        None => std::env::current_exe()
            .context("find this binary's directory")?
            .with_file_name("outbox-relay"),
    };
    anyhow::ensure!(
        path.is_file(),
        "no relay binary at {}: build it with `cargo build --release --bins` (`cargo build --bins` \
         for a debug outbox-bench), or name one with --relay-bin",
        path.display()
    );
    Ok(path)
}
