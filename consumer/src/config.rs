//! The consumer's settings: a builder with a setter per setting, checked by
//! [`crate::Consumer::new`] before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use outbox_core::pem::TlsSettingError;
use outbox_core::redis_conn::{self, TlsFiles, TlsPaths};
use outbox_core::{host, keys, topic};

/// Settings of one [`crate::Consumer`]. Start from [`ConsumerConfig::new`], which fills in
/// every default, then change what you need with the setters; each setting's meaning is on
/// its setter.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `redis://host:port[/db]` or `rediss://...` for TLS; with [`ConsumerConfig::cluster`],
    /// the cluster's seed nodes, comma-separated (`host:port` means `redis://host:port`).
    pub(crate) redis_url: String,
    /// `redis_url` names a Redis Cluster's seed nodes: each command goes to the master of its
    /// stream's slot. One XREADGROUP can only read streams of one slot, so the topics of one
    /// consumer must share one (one topic always does); run a consumer per topic otherwise.
    pub(crate) cluster: bool,
    /// With Sentinel: the master's name and the Sentinels' password.
    pub(crate) sentinel: Option<(String, Option<String>)>,
    /// PEM file of a private CA to trust for `rediss://` (else the system's roots).
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `tls_client_key_file`).
    pub(crate) tls_client_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub(crate) tls_client_key_file: Option<PathBuf>,
    /// The relay's `redis.stream_prefix`: the stream is `<stream_prefix><topic>`.
    pub(crate) stream_prefix: String,
    /// The topics to consume, one stream each: one XREADGROUP reads all of them, so a batch
    /// (and a batch handler's transaction) can hold events of several topics. Partition keys
    /// are per topic: one key's events of one topic are handled in stream order.
    pub(crate) topics: Vec<String>,
    /// The consumer group; created (from the start of the stream) when missing.
    pub(crate) group: String,
    /// This consumer's name in the group. Keep it across restarts of the same process slot
    /// (a pod name) so a restart finds and finishes its own pending entries at once, instead
    /// of after `claim_idle`. Default: `<hostname>-<pid>`.
    pub(crate) consumer: String,
    /// Entries read per XREADGROUP (its COUNT, which Redis applies per stream: a read over
    /// several topics returns up to this many of each).
    pub(crate) batch_size: usize,
    /// How long one XREADGROUP waits for new entries (its BLOCK); also bounds how long a
    /// shutdown waits for the read in progress.
    pub(crate) block: Duration,
    /// Entries another consumer has held unacknowledged this long are claimed by this one
    /// (XAUTOCLAIM): their consumer is taken for dead. A live consumer keeps the entries it
    /// is handling from being claimed (it refreshes their idle time every third of this), so
    /// slow handlers are fine; this is how long a dead or frozen consumer's entries wait.
    pub(crate) claim_idle: Duration,
    /// Deliveries after which a failing entry goes to its topic's dead stream
    /// `<stream_prefix><topic>:dead`.
    pub(crate) max_deliveries: u64,
    /// Lanes (partition keys, or unkeyed entries) handled at once.
    pub(crate) concurrency: usize,
    /// First wait before a failed entry is retried; doubles per delivery, with jitter.
    pub(crate) retry_base: Duration,
    /// Cap of that wait. Keep it below `claim_idle`, or other consumers take the entry (and
    /// the rest of its key) while this one waits.
    pub(crate) retry_max: Duration,
    /// Park a key once one of its entries is dead-lettered: its later entries do not take
    /// effect in this group until an operator discards or redrives the dead one.
    pub(crate) park_keys: bool,
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
    /// to 10 s.
    pub fn new(
        redis_url: impl Into<String>,
        topic: impl Into<String>,
        group: impl Into<String>,
    ) -> ConsumerConfig {
        ConsumerConfig {
            redis_url: redis_url.into(),
            cluster: false,
            sentinel: None,
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
            park_keys: false,
        }
    }

    /// The topics to consume, one stream each: one XREADGROUP reads all of them, so a batch
    /// (and a batch handler's transaction) can hold events of several topics. Partition keys
    /// are per topic: one key's events of one topic are handled in stream order.
    /// The topic given to [`ConsumerConfig::new`] is replaced.
    pub fn topics<T: Into<String>>(mut self, topics: impl IntoIterator<Item = T>) -> Self {
        self.topics = topics.into_iter().map(Into::into).collect();
        self
    }
    /// `redis_url` names a Redis Cluster's seed nodes: each command goes to the master of its
    /// stream's slot. One XREADGROUP can only read streams of one slot, so the topics of one
    /// consumer must share one (one topic always does); run a consumer per topic otherwise.
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }
    /// `redis_url` lists Redis Sentinels (comma-separated; the user and password in the URL
    /// are the master's) that monitor the master under `master`; `password` is the
    /// Sentinels' own, if they need one. The consumer reads from the master they name and
    /// follows a failover by itself.
    pub fn sentinel(mut self, master: impl Into<String>, password: Option<String>) -> Self {
        self.sentinel = Some((master.into(), password));
        self
    }
    /// How `redis_url`'s servers are arranged.
    pub(crate) fn topology(&self) -> redis_conn::Topology {
        match (&self.sentinel, self.cluster) {
            (Some((master, password)), _) => redis_conn::Topology::Sentinel {
                master: master.clone(),
                password: password.clone(),
            },
            (None, true) => redis_conn::Topology::Cluster,
            (None, false) => redis_conn::Topology::Single,
        }
    }
    /// The relay's `redis.stream_prefix`: the stream is `<stream_prefix><topic>`.
    pub fn stream_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.stream_prefix = prefix.into();
        self
    }
    /// This consumer's name in the group. Keep it across restarts of the same process slot
    /// (a pod name) so a restart finds and finishes its own pending entries at once, instead
    /// of after `claim_idle`. Default: `<hostname>-<pid>`.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = name.into();
        self
    }
    /// Entries read per XREADGROUP (its COUNT, which Redis applies per stream: a read over
    /// several topics returns up to this many of each).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }
    /// How long one XREADGROUP waits for new entries (its BLOCK); also bounds how long a
    /// shutdown waits for the read in progress.
    pub fn block(mut self, d: Duration) -> Self {
        self.block = d;
        self
    }
    /// Entries another consumer has held unacknowledged this long are claimed by this one
    /// (XAUTOCLAIM): their consumer is taken for dead. A live consumer keeps the entries it
    /// is handling from being claimed (it refreshes their idle time every third of this), so
    /// slow handlers are fine; this is how long a dead or frozen consumer's entries wait.
    pub fn claim_idle(mut self, d: Duration) -> Self {
        self.claim_idle = d;
        self
    }
    /// Deliveries after which a failing entry goes to its topic's dead stream
    /// `<stream_prefix><topic>:dead`.
    pub fn max_deliveries(mut self, n: u64) -> Self {
        self.max_deliveries = n;
        self
    }
    /// Park a key in this group once one of its entries is dead-lettered (contract section
    /// 13): its later entries are held, not handled, while other keys flow, until an operator
    /// discards the dead entry or redrives it (the relay's admin: `POST
    /// /api/v1/topics/{topic}/groups/{group}/parked/{key}/discard` or `.../redrive`); then the
    /// held entries are handled in their order. The state lives in Redis, per group, so it
    /// holds across crashes, restarts and a fleet's rebalancing. Off by default.
    pub fn park_keys(mut self, on: bool) -> Self {
        self.park_keys = on;
        self
    }
    /// Lanes (partition keys, or unkeyed entries) handled at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// The wait before a failed entry is retried: `base` the first time, doubling per
    /// delivery with jitter, up to `max`. Keep `max` below `claim_idle`, or other consumers
    /// take the entry (and the rest of its key) while this one waits.
    pub fn retry(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base = base;
        self.retry_max = max;
        self
    }
    /// The TLS files of a `rediss://` URL (PEM, all optional): a private CA to trust instead
    /// of the system's roots, and a client certificate with its key for mutual TLS. Read and
    /// checked by [`crate::Consumer::new`].
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

    /// The consumer group.
    pub fn group_name(&self) -> &str {
        &self.group
    }

    /// This consumer's name in the group.
    pub fn consumer_name(&self) -> &str {
        &self.consumer
    }

    /// The topics read.
    pub fn topic_names(&self) -> &[String] {
        &self.topics
    }

    /// The keys of the topics' streams: `<stream_prefix><topic>` each.
    pub fn stream_keys(&self) -> Vec<String> {
        self.topics
            .iter()
            .map(|topic| keys::stream_key(&self.stream_prefix, topic))
            .collect()
    }

    /// The TLS files, read and checked; `None` when none is set.
    pub(crate) fn load_tls(&self) -> Result<Option<TlsFiles>, TlsSettingError> {
        let paths = TlsPaths {
            ca: (self.tls_ca_file.as_deref(), "tls_ca_file"),
            cert: (self.tls_client_cert_file.as_deref(), "tls_client_cert_file"),
            key: (self.tls_client_key_file.as_deref(), "tls_client_key_file"),
        };
        TlsFiles::load(paths, &redis_conn::urls(&self.redis_url, &self.topology()))
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
        keys::dead_key(&self.stream_prefix, topic)
    }

    /// The dead stream of the stream `stream`: its topic's, also for a partition's stream
    /// (`<prefix><topic>:<p>`), since a topic has one dead stream whatever its partitions.
    pub(crate) fn dead_key_of_stream(&self, stream: &str) -> String {
        for topic in &self.topics {
            let base = keys::stream_key(&self.stream_prefix, topic);
            let Some(rest) = stream.strip_prefix(base.as_str()) else {
                continue;
            };
            let partition = rest
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            if rest.is_empty() || partition {
                return keys::dead_key(&self.stream_prefix, topic);
            }
        }
        keys::dead_key_of(stream)
    }

    /// Checks every setting; the error names the first bad one.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |setting, reason: &str| {
            Err(ConfigError {
                setting,
                reason: reason.to_string(),
            })
        };
        let urls = redis_conn::urls(&self.redis_url, &self.topology());
        if self.cluster && self.sentinel.is_some() {
            return bad(
                "cluster",
                "a Redis Cluster is not reached through Sentinels: one or the other",
            );
        }
        if urls.is_empty() {
            return bad("redis_url", "names no seed node");
        }
        if !urls
            .iter()
            .all(|u| u.starts_with("redis://") || u.starts_with("rediss://"))
        {
            return bad("redis_url", "must start with redis:// or rediss://");
        }
        if self.topics.is_empty() {
            return bad("topics", "at least one topic");
        }
        for (i, topic) in self.topics.iter().enumerate() {
            if !topic::is_valid(topic) {
                return bad("topics", &format!("each {}", topic::RULE));
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
        Ok(())
    }
}

/// `<hostname>-<pid>`: unique among running processes, and stable for nothing (pass your pod
/// name to keep a restart's pending entries its own).
fn default_consumer_name() -> String {
    let host = host::name().unwrap_or_else(|| "consumer".to_string());
    format!("{host}-{}", std::process::id())
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
        assert_eq!(
            c.dead_key_of_stream("outbox:order.created:7"),
            "outbox:order.created:dead"
        );
        assert_eq!(
            c.dead_key_of_stream("outbox:order.created"),
            "outbox:order.created:dead"
        );
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
        assert!(c()
            .tls_files(Some("ca.pem".into()), None, None)
            .load_tls()
            .is_err_and(|e| e.0.contains("rediss://")));
        assert!(ConsumerConfig::new("rediss://h", "t", "g")
            .tls_files(None, Some("cert.pem".into()), None)
            .load_tls()
            .is_err_and(|e| e.0.contains("go together")));
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
        assert!(c("rediss://h:1,redis://h:2")
            .tls_files(Some("ca.pem".into()), None, None)
            .load_tls()
            .is_err_and(|e| e.0.contains("rediss://")));
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
