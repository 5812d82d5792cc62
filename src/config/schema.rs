//! The settings as types: one struct per TOML section, each field a setting whose `///`
//! comment says what it does (docs/configuration.md is the full table). serde reads them with
//! `deny_unknown_fields`, so a misspelt key is an error naming it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::groups::{self, GroupSpec};
use super::lenient;
use super::topics::{self, TopicSpec};
use crate::db::SessionMode;

/// All settings. Every field maps to a TOML path and to `OUTBOX__SECTION__KEY`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Postgres: where the outbox table lives.
    pub database: DatabaseSettings,
    /// Redis: where the streams are written.
    pub redis: RedisSettings,
    /// The admin HTTP server (health, metrics, API, UI).
    pub admin: AdminSettings,
    /// How failed events are retried and when they are dead-lettered.
    pub retry: RetrySettings,
    /// How long published rows are kept.
    pub retention: RetentionSettings,
    /// The claim loop.
    pub relay: RelaySettings,
    /// How log lines are written.
    pub log: LogSettings,
    /// This replica's name in heartbeats and logs; defaults to the host name.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub instance_id: Option<String>,
    /// Consumer groups the relay creates before it first publishes to their topic.
    #[serde(deserialize_with = "groups::deserialize")]
    pub groups: Vec<GroupSpec>,
    /// Topics with more than one partition (one stream per partition); a topic not listed has
    /// one.
    #[serde(deserialize_with = "topics::deserialize")]
    pub topics: Vec<TopicSpec>,
}

/// Log settings. The level is `RUST_LOG`'s (tracing's env filter), default `info`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` (for a terminal) or `json` (one object per line, for a log pipeline).
    pub format: LogFormat,
}

/// The shape of a log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines, colored on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's
    /// fields, and the spans it happened in.
    Json,
}

/// Postgres settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://user@host:port/db`; required by `run` and `migrate`.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub url: Option<String>,
    /// Postgres connections per replica, LISTEN aside: two form the admin server's pool, the
    /// rest the relay's (claim cycles and maintenance).
    pub pool_size: u32,
    /// Keep the claim cycle's statements prepared on each connection, a session of its own.
    /// Off: keep nothing in a session between transactions (`db::pooler`), as behind a pooler
    /// in transaction mode (PgBouncer, any version; with `relay.poll_only`).
    pub prepared_statements: bool,
    /// What sits between the relay and Postgres: `"none"`, or `"transaction"` for a pooler in
    /// transaction mode (PgBouncer `pool_mode = transaction`), which means what
    /// `prepared_statements = false` with `relay.poll_only = true` means.
    pub pooler: SessionMode,
}

/// Redis settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSettings {
    /// `redis://host:port/db`; with `cluster`, the seed nodes, comma-separated.
    pub url: String,
    /// Redis Cluster: `url` names one or more seed nodes, each command goes to the master of
    /// its key's slot.
    pub cluster: bool,
    /// Redis Sentinel: `url` lists the Sentinels, which monitor the master under this name;
    /// the relay publishes to the master they name and follows a failover.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub sentinel_master: Option<String>,
    /// The Sentinels' own password, if they need one (the master's is in `url`).
    #[serde(deserialize_with = "lenient::opt_string")]
    pub sentinel_password: Option<String>,
    /// Stream key of a topic is `<stream_prefix><topic>`.
    #[serde(deserialize_with = "lenient::string")]
    pub stream_prefix: String,
    /// How long an event id is remembered to refuse a second XADD of the same event.
    #[serde(with = "humantime_serde")]
    pub dedup_window: Duration,
    /// An event whose entry would be larger than this is a poison event, never sent.
    pub max_payload_bytes: usize,
    /// When set, each XADD trims its stream to about this many entries (`MAXLEN ~`).
    pub maxlen: Option<u64>,
    /// Every `retention.interval`, trim each stream that has declared groups up to the oldest
    /// entry one of them has not acknowledged.
    pub trim_acked: bool,
    /// How long one publish round trip may take before Redis counts as unreachable.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Replicas that must acknowledge a batch's writes (`WAIT`) before its events are marked
    /// published; 0 marks them once the master answered.
    pub wait_replicas: u32,
    /// How long to wait for those replicas (and the append-only file) before the batch counts
    /// as not written: its events stay pending and go out again, without an attempt.
    #[serde(with = "humantime_serde")]
    pub wait_timeout: Duration,
    /// The master must also have written the batch to its append-only file (`WAITAOF`).
    pub wait_fsync: bool,
    /// Above this share of Redis's `maxmemory` (the fullest master's), publishing holds
    /// (not ready) instead of running into OOM refusals; 1 holds only when Redis is full.
    pub max_memory_ratio: f64,
    /// PEM file of the CA certificates that sign the Redis server's certificate (with a
    /// `rediss://` URL); without it, the system's CAs. The server's name must match its
    /// certificate either way.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate, for Redis servers that require one (mutual TLS).
    pub client_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub client_key_file: Option<PathBuf>,
}

/// Admin server settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Listen address, `host:port`.
    pub addr: String,
    /// Bearer token for the API and the UI login; without one, only loopback is served.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub token: Option<String>,
    /// A second token that may look at everything (API reads, UI pages) but change nothing.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub read_only_token: Option<String>,
    /// Wrong tokens one client address may present per minute (API or login page) before
    /// it is refused with 429 for the rest of that minute; 0 turns the limit off.
    pub failed_logins_per_minute: u32,
    /// The payload and header bytes one page of events may hold (API and UI lists): a page
    /// stops short of its `limit` there, its `next` cursor going on.
    pub max_response_bytes: u64,
}

/// Retry policy for events whose publish failed through their own fault.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Failed attempts after which an event is dead-lettered.
    pub max_attempts: u32,
    /// Delay after the first failure; doubles with each further failure.
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// Upper bound of the delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
}

/// Retention of published rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// Published rows older than this are deleted; `0s` deletes them at publish time.
    #[serde(with = "humantime_serde")]
    pub published_for: Duration,
    /// How often the cleaner runs.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Rows deleted per statement: small enough never to stall publishing.
    pub batch_size: u32,
}

/// The claim loop.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelaySettings {
    /// How long a claim lasts before another replica may take the event: the claim
    /// transaction of a replica that hangs or loses its network is ended by Postgres after this.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// Events claimed per transaction.
    pub batch_size: u32,
    /// Bytes of payload and headers claimed per transaction (the first event always goes,
    /// however big): bounds the relay's memory when events are large.
    pub batch_bytes: u64,
    /// Claim transactions a replica runs at once while there is a backlog (one when idle).
    pub workers: u32,
    /// Mark a batch published while its publish runs, in the same transaction (see
    /// `relay::overlap`); off publishes first, then marks what reached its stream.
    pub overlap_mark: bool,
    /// While events arrive faster than this (events/s), producers stop notifying and the
    /// relays poll every 5 ms (see `relay::quiet`); 0 keeps NOTIFY always.
    pub quiet_above: u32,
    /// Claim transactions running at once across all replicas (advisory-lock slots); 0: no
    /// cap. More than the database's cores can run only slow each other down.
    pub cluster_claims: u32,
    /// Fallback poll interval when no notification arrives (also the retry-due check).
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Do not LISTEN (for PgBouncer in transaction pooling mode): poll only.
    pub poll_only: bool,
    /// How often a replica writes its heartbeat.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// `/healthz` fails when no claim cycle has ended for this long while events are pending:
    /// the process runs but relays nothing, and a liveness probe should restart it. Defaults
    /// to twice the longer of `relay.lease` and `relay.poll_interval` (at least 10s).
    #[serde(with = "humantime_serde")]
    pub stall_after: Duration,
}

impl RedisSettings {
    /// How `url`'s servers are arranged: one server, a cluster's seeds, or Sentinels.
    pub fn topology(&self) -> outbox_core::redis_conn::Topology {
        use outbox_core::redis_conn::Topology;
        match (&self.sentinel_master, self.cluster) {
            (Some(master), _) => Topology::Sentinel {
                master: master.clone(),
                password: self.sentinel_password.clone(),
            },
            (None, true) => Topology::Cluster,
            (None, false) => Topology::Single,
        }
    }
}
