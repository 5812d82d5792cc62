//! The command line (clap): `migrate`, `run`, `demo`, `tail`, `repartition`, `replay`,
//! `config`, each taking `--config FILE`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::Overrides;

/// Publishes a Postgres transactional outbox to Redis Streams.
#[derive(Debug, Parser)]
#[command(name = "outbox-relay", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending migrations to DATABASE_URL (idempotent, safe to race), then exit.
    Migrate(MigrateArgs),
    /// Run the relay and the admin server until SIGTERM/SIGINT.
    Run(CommonArgs),
    /// Create a local database, migrate, and run the relay with a sample producer.
    Demo(DemoArgs),
    /// Print a topic's stream entries as they arrive, one JSON object per line.
    Tail(TailArgs),
    /// Change a topic's partition count, keeping per-key order for its declared groups.
    Repartition(RepartitionArgs),
    /// Publish again, as new entries in their original order, a topic's published events
    /// still kept whose publish time lies in a range; prints `{"replayed": n}`.
    Replay(ReplayArgs),
    /// Print the effective configuration (every layer applied) as TOML, secrets as `***`;
    /// a bad configuration exits 2 as `run` would.
    Config(CommonArgs),
}

/// Flags of `migrate`.
#[derive(Debug, Args, Clone)]
pub struct MigrateArgs {
    /// The common flags (`--database-url`, `--config`).
    #[command(flatten)]
    pub common: CommonArgs,
    /// How long to keep trying while Postgres cannot be reached (starting, failing over),
    /// one log line per try; `0s` tries once.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub wait: std::time::Duration,
    /// Release this adopted table (its name as it was adopted, as `migrate` logs it): drop
    /// its copy trigger and function, so its rows are no longer published. Repeatable. A
    /// table missing from `[[tables]]` is otherwise kept adopted.
    #[arg(long, value_name = "TABLE")]
    pub release: Vec<String>,
}

/// Flags of `replay`.
#[derive(Debug, Args, Clone)]
pub struct ReplayArgs {
    /// The common flags (`--database-url`, `--redis-url`, `--config`).
    #[command(flatten)]
    pub common: CommonArgs,
    /// The topic.
    pub topic: String,
    /// Published at or after this: RFC 3339 (`2026-12-04T10:00:00Z`) or a duration meaning
    /// that long ago (`15m`).
    #[arg(long, value_name = "TIME")]
    pub since: String,
    /// Published before this (same forms); default: now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

/// Flags of `repartition`.
#[derive(Debug, Args, Clone)]
pub struct RepartitionArgs {
    /// The common flags (`--database-url`, `--redis-url`, `--config` with the declared
    /// groups).
    #[command(flatten)]
    pub common: CommonArgs,
    /// The topic.
    pub topic: String,
    /// Its new partition count, 1 to 1024.
    pub partitions: u32,
}

/// Flags of `tail`.
#[derive(Debug, Args, Clone)]
pub struct TailArgs {
    /// The common flags (`--redis-url`, `--config`; the stream prefix comes from the
    /// configuration).
    #[command(flatten)]
    pub common: CommonArgs,
    /// The topic whose stream to read.
    pub topic: String,
    /// `0`: every entry still in the stream; `$`: only entries added from now on (with
    /// `--group`, where a new group starts).
    #[arg(long, default_value = "$", value_parser = ["0", "$"])]
    pub from: String,
    /// Read as a member of this consumer group (created if missing) and acknowledge each
    /// entry once printed.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Exit after this many entries.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Read only this partition of a partitioned topic (default: all of them).
    #[arg(long, value_name = "P")]
    pub partition: Option<u32>,
}

/// Flags every command takes. They override the file and the environment.
#[derive(Debug, Args, Clone, Default)]
pub struct CommonArgs {
    /// TOML configuration file (also `OUTBOX_CONFIG`).
    #[arg(long, value_name = "FILE", env = "OUTBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// Postgres URL (database.url).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Redis URL (redis.url).
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Admin listen address (admin.addr): an IP or a host name, and a port.
    #[arg(long, value_name = "HOST:PORT")]
    pub admin_addr: Option<String>,
    /// This replica's name (instance_id).
    #[arg(long, value_name = "NAME")]
    pub instance_id: Option<String>,
}

/// Flags of `demo`.
#[derive(Debug, Args, Clone)]
pub struct DemoArgs {
    /// The common flags.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Sample events produced per second.
    #[arg(long, default_value_t = 20)]
    pub rate: u32,
}

impl CommonArgs {
    /// The flags as configuration overrides.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            database_url: self.database_url.clone(),
            redis_url: self.redis_url.clone(),
            admin_addr: self.admin_addr.clone(),
            instance_id: self.instance_id.clone(),
        }
    }
}
