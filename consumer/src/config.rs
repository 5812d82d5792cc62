//! The consumer's settings: a plain struct with a builder-style setter per field, checked by
//! [`ConsumerConfig::validate`] before anything connects.

use std::path::PathBuf;
use std::time::Duration;

/// Settings of one [`crate::Consumer`]. Start from [`ConsumerConfig::new`], which fills in
/// every default, then change what you need.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `redis://host:port[/db]` or `rediss://...` for TLS; with [`ConsumerConfig::cluster`],
    /// the cluster's seed nodes, comma-separated (`host:port` means `redis://host:port`).
    pub redis_url: String,
    /// `redis_url` names a Redis Cluster's seed nodes: each command goes to the master of its
    /// stream's slot. One XREADGROUP can only read streams of one slot, so the topics of one
    /// consumer must share one (one topic always does); run a consumer per topic otherwise.
    pub cluster: bool,
    /// PEM file of a private CA to trust for `rediss://` (else the system's roots).
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `tls_client_key_file`).
    pub tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub tls_client_key_file: Option<PathBuf>,
    /// The relay's `redis.stream_prefix`: the stream is `<stream_prefix><topic>`.
    pub stream_prefix: String,
    /// The topics to consume, one stream each: one XREADGROUP reads all of them, so a batch
    /// (and a batch handler's transaction) can hold events of several topics. Partition keys
    /// are per topic: one key's events of one topic are handled in stream order.
    pub topics: Vec<String>,
    /// The consumer group; created (from the start of the stream) when missing.
    pub group: String,
    /// This consumer's name in the group. Keep it across restarts of the same process slot
    /// (a pod name) so a restart finds and finishes its own pending entries at once, instead
    /// of after `claim_idle`. Default: `<hostname>-<pid>`.
    pub consumer: String,
    /// Entries read per XREADGROUP (its COUNT, which Redis applies per stream: a read over
    /// several topics returns up to this many of each).
    pub batch_size: usize,
    /// How long one XREADGROUP waits for new entries (its BLOCK); also bounds how long a
    /// shutdown waits for the read in progress.
    pub block: Duration,
    /// Entries another consumer has held unacknowledged this long are claimed by this one
    /// (XAUTOCLAIM): their consumer is taken for dead. A live consumer keeps the entries it
    /// is handling from being claimed (it refreshes their idle time every third of this), so
    /// slow handlers are fine; this is how long a dead or frozen consumer's entries wait.
    pub claim_idle: Duration,
    /// Deliveries after which a failing entry goes to its topic's dead stream
    /// `<stream_prefix><topic>:dead`.
    pub max_deliveries: u64,
    /// Lanes (partition keys, or unkeyed entries) handled at once.
    pub concurrency: usize,
    /// First wait before a failed entry is retried; doubles per delivery, with jitter.
    pub retry_base: Duration,
    /// Cap of that wait. Keep it below `claim_idle`, or other consumers take the entry (and
    /// the rest of its key) while this one waits.
    pub retry_max: Duration,
    /// Inbox rows older than this are deleted (inbox mode only). It must exceed how long an
    /// entry can still be redelivered: entries are redelivered until acknowledged, so this is
    /// about the longest outage or backlog you plan to survive; days, not minutes.
    pub inbox_retention: Duration,
    /// How often the inbox retention runs.
    pub inbox_cleanup_interval: Duration,
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid consumer setting `{setting}`: {reason}")]
pub struct ConfigError {
    /// The field's name.
    pub setting: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl ConsumerConfig {
    /// Defaults for consuming `topic` as `group` from `redis_url`: prefix `outbox:`, batches
    /// of 100, block 2 s, claim idle 30 s, 5 deliveries, 16 lanes at once, retries from 200 ms
    /// to 10 s, inbox retention 7 days checked every minute.
    pub fn new(
        redis_url: impl Into<String>,
        topic: impl Into<String>,
        group: impl Into<String>,
    ) -> ConsumerConfig {
        ConsumerConfig {
            redis_url: redis_url.into(),
            cluster: false,
            tls_ca_file: None,
            tls_client_cert_file: None,
            tls_client_key_file: None,
            stream_prefix: "outbox:".into(),
            topics: vec![topic.into()],
            group: group.into(),
            consumer: default_consumer_name(),
            batch_size: 100,
            block: Duration::from_secs(2),
            claim_idle: Duration::from_secs(30),
            max_deliveries: 5,
            concurrency: 16,
            retry_base: Duration::from_millis(200),
            retry_max: Duration::from_secs(10),
            inbox_retention: Duration::from_secs(7 * 24 * 3600),
            inbox_cleanup_interval: Duration::from_secs(60),
        }
    }

    /// Sets [`ConsumerConfig::topics`]: this consumer reads all of them (the topic given to
    /// [`ConsumerConfig::new`] is replaced).
    pub fn topics<T: Into<String>>(mut self, topics: impl IntoIterator<Item = T>) -> Self {
        self.topics = topics.into_iter().map(Into::into).collect();
        self
    }
    /// Sets [`ConsumerConfig::cluster`].
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }
    /// Sets [`ConsumerConfig::stream_prefix`].
    pub fn stream_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.stream_prefix = prefix.into();
        self
    }
    /// Sets [`ConsumerConfig::consumer`].
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = name.into();
        self
    }
    /// Sets [`ConsumerConfig::batch_size`].
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }
    /// Sets [`ConsumerConfig::block`].
    pub fn block(mut self, d: Duration) -> Self {
        self.block = d;
        self
    }
    /// Sets [`ConsumerConfig::claim_idle`].
    pub fn claim_idle(mut self, d: Duration) -> Self {
        self.claim_idle = d;
        self
    }
    /// Sets [`ConsumerConfig::max_deliveries`].
    pub fn max_deliveries(mut self, n: u64) -> Self {
        self.max_deliveries = n;
        self
    }
    /// Sets [`ConsumerConfig::concurrency`].
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// Sets [`ConsumerConfig::retry_base`] and [`ConsumerConfig::retry_max`].
    pub fn retry(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base = base;
        self.retry_max = max;
        self
    }
    /// Sets [`ConsumerConfig::inbox_retention`].
    pub fn inbox_retention(mut self, d: Duration) -> Self {
        self.inbox_retention = d;
        self
    }
    /// Sets the TLS files (see the fields); all optional.
    pub fn tls_files(
        mut self,
        ca: Option<PathBuf>,
        client_cert: Option<PathBuf>,
        client_key: Option<PathBuf>,
    ) -> Self {
        self.tls_ca_file = ca;
        self.tls_client_cert_file = client_cert;
        self.tls_client_key_file = client_key;
        self
    }

    /// The keys of the topics' streams: `<stream_prefix><topic>` each.
    pub fn stream_keys(&self) -> Vec<String> {
        self.topics
            .iter()
            .map(|topic| format!("{}{topic}", self.stream_prefix))
            .collect()
    }

    /// Whether every topic's stream hashes to one cluster slot.
    fn topics_share_a_slot(&self) -> bool {
        let mut slots = self
            .stream_keys()
            .into_iter()
            .map(redis::cluster_routing::Slot::for_key);
        match slots.next() {
            Some(first) => slots.all(|slot| slot == first),
            None => true,
        }
    }

    /// The key of a topic's dead stream: `<stream_prefix><topic>:dead`.
    pub fn dead_key(&self, topic: &str) -> String {
        format!("{}{topic}:dead", self.stream_prefix)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting, reason: &str| {
            Err(ConfigError {
                setting,
                reason: reason.to_string(),
            })
        };
        let urls = match self.cluster {
            true => crate::redis_conn::seeds(&self.redis_url),
            false => vec![self.redis_url.clone()],
        };
        if urls.is_empty() {
            return bad("redis_url", "names no seed node");
        }
        if !urls
            .iter()
            .all(|u| u.starts_with("redis://") || u.starts_with("rediss://"))
        {
            return bad("redis_url", "must start with redis:// or rediss://");
        }
        let tls_files = self.tls_ca_file.is_some()
            || self.tls_client_cert_file.is_some()
            || self.tls_client_key_file.is_some();
        if tls_files && !urls.iter().all(|u| u.starts_with("rediss://")) {
            return bad(
                "tls_ca_file",
                "TLS files need a rediss:// redis_url (every seed's, on a cluster)",
            );
        }
        if self.tls_client_cert_file.is_some() != self.tls_client_key_file.is_some() {
            return bad(
                "tls_client_cert_file",
                "the client certificate and key go together: set both or neither",
            );
        }
        if self.topics.is_empty() {
            return bad("topics", "at least one topic");
        }
        for (i, topic) in self.topics.iter().enumerate() {
            if topic.is_empty() || topic.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad("topics", "each 1 or more characters, no whitespace");
            }
            if self.topics[..i].contains(topic) {
                return bad("topics", "each topic once");
            }
        }
        if self.cluster && !self.topics_share_a_slot() {
            return bad(
                "topics",
                "on a Redis Cluster one consumer reads streams of one hash slot only: run a consumer per topic, or give the topics' streams one hash tag (a stream_prefix like `{orders}:`)",
            );
        }
        for (setting, value) in [("group", &self.group), ("consumer", &self.consumer)] {
            if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(setting, "1 or more characters, no whitespace");
            }
        }
        if self.batch_size == 0 {
            return bad("batch_size", "at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "at least 1");
        }
        if self.max_deliveries == 0 {
            return bad("max_deliveries", "at least 1");
        }
        if self.block.is_zero() {
            // BLOCK 0 means "forever" to Redis: the loop would never see a shutdown.
            return bad("block", "more than 0");
        }
        if self.claim_idle < Duration::from_millis(100) {
            return bad("claim_idle", "at least 100ms");
        }
        if self.retry_base.is_zero() || self.retry_max < self.retry_base {
            return bad("retry_base", "more than 0 and at most retry_max");
        }
        if self.inbox_cleanup_interval.is_zero() {
            return bad("inbox_cleanup_interval", "more than 0");
        }
        Ok(())
    }
}

/// `<hostname>-<pid>`: unique among running processes, and stable for nothing (pass your pod
/// name to keep a restart's pending entries its own).
pub fn default_consumer_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "consumer".to_string());
    format!("{}-{}", host.trim(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_keys_follow_the_prefix() {
        let c = ConsumerConfig::new("redis://127.0.0.1", "order.created", "billing");
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.stream_keys(), vec!["outbox:order.created"]);
        assert_eq!(c.dead_key("order.created"), "outbox:order.created:dead");
        let several = c.clone().topics(["a", "b"]).stream_prefix("p:");
        assert_eq!(several.validate(), Ok(()));
        assert_eq!(several.stream_keys(), vec!["p:a", "p:b"]);
        assert!(c.consumer.ends_with(&format!("-{}", std::process::id())));
    }

    #[test]
    fn bad_settings_are_named() {
        let c = || ConsumerConfig::new("redis://127.0.0.1", "t", "g");
        assert_eq!(
            c().batch_size(0).validate().map_err(|e| e.setting),
            Err("batch_size")
        );
        assert_eq!(
            c().max_deliveries(0).validate().map_err(|e| e.setting),
            Err("max_deliveries")
        );
        assert_eq!(
            ConsumerConfig::new("http://x", "t", "g")
                .validate()
                .map_err(|e| e.setting),
            Err("redis_url")
        );
        assert_eq!(
            c().tls_files(Some("ca.pem".into()), None, None)
                .validate()
                .map_err(|e| e.setting),
            Err("tls_ca_file")
        );
        assert_eq!(
            c().consumer("a b").validate().map_err(|e| e.setting),
            Err("consumer")
        );
        assert_eq!(
            c().topics(Vec::<String>::new())
                .validate()
                .map_err(|e| e.setting),
            Err("topics")
        );
        assert_eq!(
            c().topics(["a", "b", "a"])
                .validate()
                .map_err(|e| e.setting),
            Err("topics")
        );
    }

    #[test]
    fn a_cluster_consumer_reads_seeds_and_topics_of_one_slot() {
        let c = |url: &str| ConsumerConfig::new(url, "a", "g").cluster(true);
        assert_eq!(
            c("127.0.0.1:7000, redis://127.0.0.1:7001").validate(),
            Ok(())
        );
        assert_eq!(c(" , ").validate().map_err(|e| e.setting), Err("redis_url"));
        assert_eq!(
            c("rediss://h:1,redis://h:2")
                .tls_files(Some("ca.pem".into()), None, None)
                .validate()
                .map_err(|e| e.setting),
            Err("tls_ca_file")
        );
        // `outbox:a` and `outbox:b` hash to different slots; one hash tag puts them in one.
        assert_eq!(
            c("h:1")
                .topics(["a", "b"])
                .validate()
                .map_err(|e| e.setting),
            Err("topics")
        );
        assert_eq!(
            c("h:1")
                .topics(["a", "b"])
                .stream_prefix("{orders}:")
                .validate(),
            Ok(())
        );
        // Off a cluster, any topics go together.
        assert_eq!(
            ConsumerConfig::new("redis://h:1", "a", "g")
                .topics(["a", "b"])
                .validate(),
            Ok(())
        );
    }
}
