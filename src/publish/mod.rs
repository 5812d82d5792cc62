//! The Redis Streams publisher: one atomic, deduplicating script call per topic per batch.
//!
//! The relay hands it a topic's chains (a key's run of events in order, or one unkeyed event);
//! it returns one [`Outcome`] per event. A failure that is the event's fault (WRONGTYPE,
//! oversized entry, ...) fails that event and skips the rest of its chain, so a key never
//! gets a later event ahead of an earlier one. A failure that is nobody's fault (Redis away,
//! timeout, LOADING) fails the whole call with [`PublishError::Outage`].

pub mod classify;
pub mod keys;
pub mod script;

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use redis::aio::ConnectionManager;
use uuid::Uuid;

pub use classify::{classify_error, classify_reply, Verdict};

/// One event as it goes into its stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEvent {
    /// The event id (the `id` field, and the dedup key).
    pub id: Uuid,
    /// The topic (the `topic` field).
    pub topic: String,
    /// The partition key (the `key` field, absent when null).
    pub key: Option<String>,
    /// JSON text.
    pub payload: String,
    /// JSON text.
    pub headers: String,
    /// When the producer wrote it.
    pub created_at: DateTime<Utc>,
}

impl StreamEvent {
    /// The entry's fields, in the order of the contract.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("id", self.id.to_string()),
            ("topic", self.topic.clone()),
            ("payload", self.payload.clone()),
            ("headers", self.headers.clone()),
            (
                "created_at",
                self.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
            ),
        ];
        if let Some(key) = &self.key {
            fields.push(("key", key.clone()));
        }
        fields
    }

    /// Bytes of the entry's field names and values.
    pub fn entry_size(&self) -> usize {
        self.fields().iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// What happened to one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Appended now, with this stream entry id.
    Published(String),
    /// Already in the stream from an earlier attempt (the dedup window remembered it).
    Duplicate,
    /// Refused through the event's own fault; the error is for a person.
    Failed(String),
    /// Not attempted because an earlier event of its key failed in this batch.
    Skipped,
}

/// A publish call that failed as a whole.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PublishError {
    /// Redis is unreachable, too slow or not accepting writes: nobody's fault.
    #[error("redis unavailable: {0}")]
    Outage(String),
}

/// Settings of the publisher.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// `redis.stream_prefix`.
    pub stream_prefix: String,
    /// `redis.dedup_window`.
    pub dedup_window: Duration,
    /// `redis.max_payload_bytes`.
    pub max_payload_bytes: usize,
    /// `redis.maxlen`.
    pub maxlen: Option<u64>,
    /// `redis.timeout`.
    pub timeout: Duration,
}

/// Writes events into their streams. Cheap to clone: the connection is multiplexed.
#[derive(Clone)]
pub struct Publisher {
    conn: ConnectionManager,
    config: PublisherConfig,
}

impl Publisher {
    /// A publisher over a (lazily connecting) connection manager.
    pub fn new(conn: ConnectionManager, config: PublisherConfig) -> Self {
        Publisher { conn, config }
    }

    /// Opens a lazy connection manager tuned for the relay: it never blocks start-up, fails a
    /// command fast while Redis is away, and lets big batches take up to `timeout`.
    pub fn connect(url: &str, timeout: Duration) -> Result<ConnectionManager, redis::RedisError> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        ConnectionManager::new_lazy_with_config(client, config)
    }

    /// The settings in force.
    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// Publishes one topic's chains; returns an outcome per event id, in input order.
    pub async fn publish(
        &self,
        topic: &str,
        chains: &[Vec<StreamEvent>],
    ) -> Result<Vec<(Uuid, Outcome)>, PublishError> {
        let stream = keys::stream_key(&self.config.stream_prefix, topic);
        let mut outcomes: Vec<(Uuid, Option<Outcome>)> = Vec::new();
        let mut sent: Vec<(usize, &StreamEvent, &str)> = Vec::new();
        for chain in chains {
            let mut broken = false;
            for event in chain {
                let slot = outcomes.len();
                if broken {
                    outcomes.push((event.id, Some(Outcome::Skipped)));
                    continue;
                }
                let size = event.entry_size();
                if size > self.config.max_payload_bytes {
                    outcomes.push((
                        event.id,
                        Some(Outcome::Failed(format!(
                            "entry is {size} bytes, over redis.max_payload_bytes ({})",
                            self.config.max_payload_bytes
                        ))),
                    ));
                    broken = true;
                    continue;
                }
                outcomes.push((event.id, None));
                sent.push((slot, event, event.key.as_deref().unwrap_or("")));
            }
        }
        if !sent.is_empty() {
            let now = Utc::now().timestamp().max(0) as u64;
            let (current, previous) = keys::dedup_keys(&stream, self.config.dedup_window, now);
            let mut invocation = script::PUBLISH.prepare_invoke();
            invocation
                .key(&stream)
                .key(&current)
                .key(&previous)
                .arg(keys::dedup_ttl_secs(self.config.dedup_window))
                .arg(self.config.maxlen.unwrap_or(0))
                .arg(sent.len());
            for (_, event, chain) in &sent {
                let fields = event.fields();
                invocation
                    .arg(event.id.as_bytes().as_slice())
                    .arg(*chain)
                    .arg(fields.len());
                for (name, value) in fields {
                    invocation.arg(name).arg(value);
                }
            }
            let mut conn = self.conn.clone();
            let call = invocation.invoke_async::<Vec<String>>(&mut conn);
            let replies = match tokio::time::timeout(self.config.timeout, call).await {
                Err(_) => {
                    return Err(PublishError::Outage(format!(
                        "no answer within {:?}",
                        self.config.timeout
                    )))
                }
                Ok(Err(e)) => match classify_error(&e) {
                    Verdict::Outage => return Err(PublishError::Outage(e.to_string())),
                    Verdict::EventFault => vec![format!("err:{e}"); sent.len()],
                },
                Ok(Ok(replies)) => replies,
            };
            if replies.len() != sent.len() {
                return Err(PublishError::Outage(format!(
                    "script answered {} results for {} events",
                    replies.len(),
                    sent.len()
                )));
            }
            for ((slot, _, _), reply) in sent.iter().zip(replies) {
                let outcome = script::parse_reply(&reply)?;
                outcomes[*slot].1 = Some(outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|(id, outcome)| (id, outcome.unwrap_or(Outcome::Skipped)))
            .collect())
    }

    /// PING with a short deadline, for readiness.
    pub async fn ping(&self) -> bool {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        matches!(
            tokio::time::timeout(Duration::from_secs(1), ping).await,
            Ok(Ok(_))
        )
    }
}
