//! `[redis]`: where the streams are written (one server, a cluster's seeds, or Sentinels, over
//! TLS when the URL says so), how entries are deduplicated and trimmed, and how long a publish
//! may wait. The URL and the TLS files are checked here as the connection
//! ([`outbox_core::redis_conn`]) will read them, so a bad one stops the start.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use outbox_core::cloudevent::{self, Envelope};
use outbox_core::pem::TlsSettingError;
use outbox_core::redis_conn::{self, TlsFiles, TlsPaths, Topology};

use super::lenient;
use super::rule::{at_least_one, positive, Rule};
use super::Settings;

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
    /// How entries are written: `"fields"` (one field per part of the event) or
    /// `"cloudevents"` (`id` and `cloudevent`, CloudEvents 1.0 JSON); a `[[topics]]` entry's
    /// `envelope` overrides it for its topic.
    pub envelope: Envelope,
    /// The CloudEvents `source` attribute of every event written as a CloudEvent: a URI
    /// reference naming this producer.
    #[serde(deserialize_with = "lenient::string")]
    pub cloudevents_source: String,
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

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            sentinel_master: None,
            sentinel_password: None,
            stream_prefix: "outbox:".into(),
            dedup_window: Duration::from_secs(15 * 60),
            max_payload_bytes: 1024 * 1024,
            maxlen: None,
            envelope: Envelope::Fields,
            cloudevents_source: cloudevent::DEFAULT_SOURCE.into(),
            trim_acked: false,
            timeout: Duration::from_secs(5),
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            wait_fsync: false,
            max_memory_ratio: 0.9,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
        }
    }
}

impl RedisSettings {
    /// How `url`'s servers are arranged: one server, a cluster's seeds, or Sentinels.
    pub fn topology(&self) -> Topology {
        match (&self.sentinel_master, self.cluster) {
            (Some(master), _) => Topology::Sentinel {
                master: master.clone(),
                password: self.sentinel_password.clone(),
            },
            (None, true) => Topology::Cluster,
            (None, false) => Topology::Single,
        }
    }

    /// Reads and checks the TLS files the settings name; `None` when they name none.
    pub fn tls_files(&self) -> Result<Option<TlsFiles>, TlsSettingError> {
        let paths = TlsPaths {
            ca: (self.ca_file.as_deref(), "redis.ca_file"),
            cert: (self.client_cert_file.as_deref(), "redis.client_cert_file"),
            key: (self.client_key_file.as_deref(), "redis.client_key_file"),
        };
        TlsFiles::load(paths, &redis_conn::urls(&self.url, &self.topology()))
    }
}

/// The checks of `[redis]`. Those that relate a Redis timing to `relay.lease` are the relay's
/// (`relay::RULES`): they follow the lease's own check.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["redis.max_memory_ratio"],
        check: |s| {
            let r = s.redis.max_memory_ratio;
            if r > 0.0 && r <= 1.0 {
                Ok(())
            } else {
                Err(format!(
                    "must be above 0 and at most 1 (a share of Redis's maxmemory), not {r}"
                ))
            }
        },
    },
    Rule {
        settings: &["redis.sentinel_master", "redis.cluster"],
        check: |s| {
            match (&s.redis.sentinel_master, s.redis.cluster) {
            (Some(_), true) => Err("a Redis Cluster is not reached through Sentinels: set redis.cluster or redis.sentinel_master, not both".into()),
            _ => Ok(()),
        }
        },
    },
    Rule {
        settings: &["redis.url", "redis.cluster", "redis.sentinel_master"],
        check: |s| redis_url(&s.redis.url, &s.redis.topology()),
    },
    Rule {
        settings: &[
            "redis.ca_file",
            "redis.client_cert_file",
            "redis.client_key_file",
        ],
        check: |s| s.redis.tls_files().map(|_| ()).map_err(|e| e.0),
    },
    Rule {
        settings: &["redis.stream_prefix"],
        check: |s| {
            if s.redis.stream_prefix.chars().any(char::is_whitespace) {
                return Err("must not contain whitespace".into());
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.cloudevents_source"],
        check: |s| {
            let source = &s.redis.cloudevents_source;
            if source.is_empty() || source.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(format!(
                    "must be a non-empty URI reference (CloudEvents' `source`), without whitespace, not {source:?}"
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.max_payload_bytes"],
        check: |s| at_least_one(s.redis.max_payload_bytes as u64),
    },
    Rule {
        settings: &["redis.timeout"],
        check: |s| positive(s.redis.timeout),
    },
];

fn redis_url(raw: &str, topology: &Topology) -> Result<(), String> {
    match topology {
        Topology::Cluster => return redis_conn::check_seeds(raw),
        Topology::Sentinel { master, .. } => {
            if master.is_empty() {
                return Err("redis.sentinel_master must name the master".into());
            }
            for url in redis_conn::seeds(raw) {
                redis::Client::open(url.as_str()).map_err(|e| format!("Sentinel {url}: {e}"))?;
            }
            return Ok(());
        }
        Topology::Single => {}
    }
    if raw.contains(',') {
        return Err(format!(
            "holds several nodes ({raw}): a list of seed nodes is for a Redis Cluster (set redis.cluster = true, OUTBOX__REDIS__CLUSTER=true) or of Sentinels (set redis.sentinel_master); or give one redis:// URL"
        ));
    }
    redis::Client::open(raw)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::rules::check;
    use super::super::Settings;

    #[test]
    fn several_nodes_need_cluster_mode_and_cluster_seeds_are_checked() {
        let only = |key: &'static str| move |k: &str| k == key;
        let mut s = Settings::default();
        s.redis.url = "redis://h1:7000,redis://h2:7001".into();
        let err = check(&s, &only("redis.url")).expect_err("a list without cluster mode");
        assert_eq!(err.setting, "redis.url");
        assert!(
            err.message.contains("redis.cluster = true"),
            "{}",
            err.message
        );
        s.redis.cluster = true;
        assert!(check(&s, &only("redis.url")).is_ok());
        s.redis.url = " h1:7000, h2:7001 ".into();
        assert!(check(&s, &only("redis.url")).is_ok(), "host:port seeds");
        s.redis.url = "redis://127.0.0.1:6379".into();
        assert!(check(&s, &only("redis.cluster")).is_ok(), "one seed");
        for (bad, says) in [
            (" , ", "no seed node"),
            ("redis://h1:7000/2", "database 0"),
            ("http://h1:7000", "redis://"),
            ("redis://h1:7000,rediss://h2:7001", "TLS"),
        ] {
            s.redis.url = bad.into();
            let err = check(&s, &only("redis.url")).expect_err(bad);
            assert!(err.message.contains(says), "{bad}: {}", err.message);
        }
    }
}
