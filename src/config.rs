//! The settings of every command, loaded in layers and validated before anything starts.
//!
//! Precedence, lowest first: built-in defaults < `--config` TOML file < environment
//! (`OUTBOX__SECTION__KEY`, plus `DATABASE_URL` and `REDIS_URL`) < command-line flags.
//! figment does the layering (it keeps track of which layer a bad value came from, and its
//! errors carry the key path, which is what our one-line error needs); humantime-serde parses
//! the human durations (`250ms`, `30s`, `7d`).

use crate::db::{Session, SessionMode};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub mod groups;
mod rules;

pub use groups::GroupSpec;

/// A bad setting: the program prints it as one line and exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{setting}`: {message}")]
pub struct ConfigError {
    /// The TOML path of the setting, e.g. `retry.base`.
    pub setting: String,
    /// What is wrong with it, for a person.
    pub message: String,
}

impl ConfigError {
    fn new(setting: &str, message: impl Into<String>) -> Self {
        ConfigError {
            setting: setting.to_string(),
            message: message.into(),
        }
    }
}

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
    /// This replica's name in heartbeats and logs; defaults to the host name.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub instance_id: Option<String>,
    /// Consumer groups the relay creates before it first publishes to their topic.
    #[serde(deserialize_with = "groups::deserialize")]
    pub groups: Vec<GroupSpec>,
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

/// The shortest default `relay.stall_after`: longer than the claim loop's longest outage pause.
const MIN_STALL_AFTER: Duration = Duration::from_secs(10);

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: None,
            pool_size: 8,
            prepared_statements: true,
            pooler: SessionMode::Direct,
        }
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            stream_prefix: "outbox:".into(),
            dedup_window: Duration::from_secs(15 * 60),
            max_payload_bytes: 1024 * 1024,
            maxlen: None,
            trim_acked: false,
            timeout: Duration::from_secs(5),
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
        }
    }
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            addr: "127.0.0.1:8080".into(),
            token: None,
            read_only_token: None,
            failed_logins_per_minute: 10,
        }
    }
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 10,
            base: Duration::from_secs(1),
            max: Duration::from_secs(600),
        }
    }
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            published_for: Duration::from_secs(7 * 24 * 3600),
            interval: Duration::from_secs(60),
            batch_size: 1000,
        }
    }
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            lease: Duration::from_secs(30),
            batch_size: 1000,
            batch_bytes: 4 * 1024 * 1024,
            workers: 2,
            overlap_mark: true,
            quiet_above: 1500,
            cluster_claims: 2,
            poll_interval: Duration::from_secs(1),
            poll_only: false,
            heartbeat_interval: Duration::from_secs(5),
            stall_after: Duration::from_secs(60),
        }
    }
}

/// Values given on the command line; they override every other layer.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--database-url`
    pub database_url: Option<String>,
    /// `--redis-url`
    pub redis_url: Option<String>,
    /// `--admin-addr`
    pub admin_addr: Option<String>,
    /// `--instance-id`
    pub instance_id: Option<String>,
}

impl Settings {
    /// Loads the layers and validates the result. `base` is the bottom layer (the built-in
    /// defaults, or the demo's defaults).
    pub fn load(
        base: Settings,
        file: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        // The layers above the defaults alone, to tell which settings the user gave.
        let mut upper = Figment::new();
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::new(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            upper = upper.merge(Toml::file(path));
        }
        upper = upper
            .merge(Env::prefixed("OUTBOX__").split("__"))
            .merge(
                Env::raw()
                    .only(&["DATABASE_URL"])
                    .map(|_| "database.url".into()),
            )
            .merge(Env::raw().only(&["REDIS_URL"]).map(|_| "redis.url".into()));
        let flags = [
            ("database.url", &overrides.database_url),
            ("redis.url", &overrides.redis_url),
            ("admin.addr", &overrides.admin_addr),
            ("instance_id", &overrides.instance_id),
        ];
        for (key, value) in flags {
            if let Some(value) = value {
                upper = upper.merge(Serialized::default(key, value));
            }
        }
        let figment = Figment::from(Serialized::defaults(base)).merge(upper.clone());
        let mut settings: Settings = figment.extract().map_err(from_figment)?;
        let given = |key: &str| upper.contains(key);
        settings.follow_lease(&given);
        rules::check(&settings, &given)?;
        Ok(settings)
    }

    /// Checks what serde cannot: URLs, ranges and relations between settings. A broken rule
    /// names its first setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        rules::check(self, &|_| true)
    }

    /// Defaults that depend on `relay.lease` follow it, unless the user set them: a Redis round
    /// trip must end well within the lease, the dedup window must outlast two leases (a claim
    /// abandoned by a crashed replica is retaken within one), and a claim loop is stalled only
    /// when it has been silent for longer than a cycle may take or the poll may wait.
    fn follow_lease(&mut self, given: &dyn Fn(&str) -> bool) {
        let lease = self.relay.lease;
        if !given("redis.timeout") {
            self.redis.timeout = self.redis.timeout.min(lease / 2);
        }
        if !given("redis.dedup_window") {
            self.redis.dedup_window = self.redis.dedup_window.max(lease * 2);
        }
        if !given("relay.stall_after") {
            let cycle_gap = lease.max(self.relay.poll_interval);
            self.relay.stall_after = (cycle_gap * 2).max(MIN_STALL_AFTER);
        }
    }

    /// The database URL, required by the commands that touch Postgres.
    pub fn database_url(&self) -> Result<&str, ConfigError> {
        self.database.url.as_deref().ok_or_else(|| {
            ConfigError::new(
                "database.url",
                "is required (set DATABASE_URL or --database-url)",
            )
        })
    }

    /// The parsed admin listen address.
    pub fn admin_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.admin
            .addr
            .parse()
            .map_err(|e| ConfigError::new("admin.addr", format!("{e} (expected host:port)")))
    }

    /// This replica's name: the setting, else the host name, else a fixed fallback.
    pub fn instance_id(&self) -> String {
        if let Some(id) = &self.instance_id {
            return id.clone();
        }
        outbox_core::host::name().unwrap_or_else(|| "outbox-relay".into())
    }

    /// The session mode of the relay's connections, and the lease each transaction sets:
    /// behind a transaction pooler (`database.pooler = "transaction"`, or
    /// `database.prepared_statements = false`) nothing is kept between transactions.
    pub fn session(&self) -> Session {
        let pooled = self.database.pooler == SessionMode::TransactionPooled
            || !self.database.prepared_statements;
        Session {
            mode: match pooled {
                true => SessionMode::TransactionPooled,
                false => SessionMode::Direct,
            },
            lease: self.relay.lease,
        }
    }

    /// Whether the relay polls instead of LISTENing: `relay.poll_only`, or a transaction
    /// pooler, through which LISTEN cannot work.
    pub fn poll_only(&self) -> bool {
        self.relay.poll_only || self.database.pooler == SessionMode::TransactionPooled
    }

    /// Published rows are deleted in the publish transaction itself (`published_for = 0s`).
    pub fn delete_on_publish(&self) -> bool {
        self.retention.published_for.is_zero()
    }
}

/// Environment values arrive typed (`OUTBOX__ADMIN__TOKEN=123456` is a number to figment):
/// text settings take them as the text they were written as.
mod lenient {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    struct Text;

    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_char<E: de::Error>(self, v: char) -> Result<String, E> {
            Ok(v.to_string())
        }
    }

    pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        d.deserialize_any(Text)
    }

    struct OptText;

    impl<'de> Visitor<'de> for OptText {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Text).map(Some)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Text.visit_str(v).map(Some)
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Text.visit_i64(v).map(Some)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Text.visit_u64(v).map(Some)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Text.visit_f64(v).map(Some)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Text.visit_bool(v).map(Some)
        }
    }

    pub(super) fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_option(OptText)
    }
}

fn from_figment(error: figment::Error) -> ConfigError {
    use figment::error::Kind;
    let mut path = error.path.join(".");
    let message = match &error.kind {
        Kind::UnknownField(field, _) => {
            if error.path.last().is_none_or(|last| last != field) {
                path = if path.is_empty() {
                    field.clone()
                } else {
                    format!("{path}.{field}")
                };
            }
            "unknown setting".to_string()
        }
        other => other.to_string(),
    };
    let source = error
        .metadata
        .as_ref()
        .map(|m| format!(" (from {})", m.name))
        .unwrap_or_default();
    if path.is_empty() {
        path = "configuration".into();
    }
    ConfigError {
        setting: path,
        message: format!("{message}{source}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_contracts() {
        let s = Settings::default();
        assert_eq!(s.redis.url, "redis://127.0.0.1:6379");
        assert_eq!(s.redis.stream_prefix, "outbox:");
        assert_eq!(s.admin.addr, "127.0.0.1:8080");
        assert_eq!(s.retry.max_attempts, 10);
        assert_eq!(s.retry.base, Duration::from_secs(1));
        assert_eq!(s.retry.max, Duration::from_secs(600));
        assert_eq!(s.retention.published_for, Duration::from_secs(7 * 86400));
        assert_eq!(s.retention.interval, Duration::from_secs(60));
        assert_eq!(s.relay.lease, Duration::from_secs(30));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(900));
        assert!(s.validate().is_ok());
    }

    #[test]
    fn toml_file_layers_under_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[retry]\nbase = \"250ms\"\nmax_attempts = 3\n[database]\nurl = \"postgres://a@h/db\"\n",
        )
        .expect("write");
        let overrides = Overrides {
            database_url: Some("postgres://b@h/db".into()),
            ..Default::default()
        };
        let s = Settings::load(Settings::default(), Some(&path), &overrides).expect("load");
        assert_eq!(s.retry.base, Duration::from_millis(250));
        assert_eq!(s.retry.max_attempts, 3);
        assert_eq!(s.database.url.as_deref(), Some("postgres://b@h/db"));
    }

    #[test]
    fn unknown_key_names_the_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[retry]\nbasee = \"1s\"\n").expect("write");
        let err = Settings::load(Settings::default(), Some(&path), &Overrides::default())
            .expect_err("must fail");
        assert_eq!(err.setting, "retry.basee");
    }

    #[test]
    fn numeric_text_settings_are_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "instance_id = 42\n[admin]\ntoken = 123456\n").expect("write");
        let s =
            Settings::load(Settings::default(), Some(&path), &Overrides::default()).expect("load");
        assert_eq!(s.instance_id.as_deref(), Some("42"));
        assert_eq!(s.admin.token.as_deref(), Some("123456"));
    }

    fn load_toml(text: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).expect("write");
        Settings::load(Settings::default(), Some(&path), &Overrides::default())
    }

    #[test]
    fn groups_come_as_toml_tables() {
        let s = load_toml(
            "[[groups]]\ntopic = \"orders\"\nname = \"billing\"\n\n[[groups]]\ntopic = \"orders\"\nname = \"audit\"\nstart = \"$\"\n",
        )
        .expect("two groups");
        assert_eq!(s.groups.len(), 2);
        assert_eq!(s.groups[0], GroupSpec::new("orders", "billing"));
        assert_eq!(s.groups[1].start, "$");
        let err = load_toml("[[groups]]\ntopic = \"orders\"\nname = \"a\"\nstart = \"1\"\n")
            .expect_err("a bad start");
        assert_eq!(err.setting, "groups");
    }

    #[test]
    fn defaults_follow_a_short_lease() {
        let s = load_toml("[relay]\nlease = \"3s\"\n").expect("a short lease alone is valid");
        assert_eq!(s.redis.timeout, Duration::from_millis(1500));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(900));
        assert_eq!(s.relay.stall_after, Duration::from_secs(10));
    }

    #[test]
    fn defaults_follow_a_long_lease() {
        let s = load_toml("[relay]\nlease = \"10m\"\n").expect("a long lease alone is valid");
        assert_eq!(s.redis.timeout, Duration::from_secs(5));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(1200));
        assert_eq!(s.relay.stall_after, Duration::from_secs(1200));
    }

    #[test]
    fn a_slow_poll_lengthens_the_stall_limit() {
        let s =
            load_toml("[relay]\npoll_interval = \"60s\"\n").expect("a slow poll alone is valid");
        assert_eq!(s.relay.stall_after, Duration::from_secs(120));
    }

    #[test]
    fn a_given_value_is_kept_and_a_conflict_names_it() {
        let s = load_toml("[relay]\nlease = \"3s\"\n[redis]\ntimeout = \"2s\"\n").expect("valid");
        assert_eq!(s.redis.timeout, Duration::from_secs(2));
        let err = load_toml("[relay]\nlease = \"3s\"\n[redis]\ntimeout = \"4s\"\n")
            .expect_err("timeout above the lease");
        assert_eq!(err.setting, "redis.timeout");
        assert!(err.message.contains("below 3s"), "{}", err.message);
    }

    #[test]
    fn bad_duration_names_the_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[relay]\nlease = \"soon\"\n").expect("write");
        let err = Settings::load(Settings::default(), Some(&path), &Overrides::default())
            .expect_err("must fail");
        assert_eq!(err.setting, "relay.lease");
    }
}
