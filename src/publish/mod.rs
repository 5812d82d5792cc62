//! The Redis Streams publisher: a topic's share of a batch goes out in atomic, deduplicating
//! script calls of at most [`CALL_BYTES`] of entries each.
//!
//! The relay hands it a topic's chains (a key's run of events in order, or one unkeyed event);
//! it returns one [`Outcome`] per event. A failure that is the event's fault (WRONGTYPE,
//! oversized entry, ...) fails that event and skips the rest of its chain, so a key never
//! gets a later event ahead of an earlier one. A failure that is nobody's fault (Redis away,
//! timeout, LOADING) fails the whole call with [`PublishError::Outage`]. Which events go in
//! which call, and what a failure does to the rest of a chain, is planned without Redis
//! (`plan`); this module sends the calls.

pub mod classify;
pub mod connect;
pub mod durability;
pub mod envelope;
pub mod groups;
pub mod inspect;
pub mod keys;
pub mod lost;
pub mod marks;
pub mod memory;
pub mod parked;
mod plan;
pub mod script;
mod trace;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_core::cloudevent::Envelope;
use outbox_core::entry::field;
use outbox_core::keys::{partition_key, partition_keys, partitions_hash};
use outbox_core::partition;
use outbox_core::timestamp::created_at_text;
use redis::aio::ConnectionManager;
use uuid::Uuid;

pub use classify::{classify_error, classify_reply, Verdict};
pub use connect::RedisConn;
pub use durability::Durability;
pub use envelope::Envelopes;
pub use marks::{EntryId, Marks};

/// Upper bound of the entry bytes sent in one script call (a call blocks Redis while it runs).
pub const CALL_BYTES: usize = 4 * 1024 * 1024;

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
    /// Bytes of the entry's field names and values, without building them: a hyphenated
    /// uuid is 36 characters, a UTC timestamp with microseconds 27.
    pub fn entry_size(&self) -> usize {
        let fixed = field::ID.len() + 36 + field::TOPIC.len() + field::PAYLOAD.len();
        let fixed = fixed + field::HEADERS.len();
        let created = field::CREATED_AT.len() + 27;
        let key = self.key.as_ref().map_or(0, |k| field::KEY.len() + k.len());
        fixed + self.topic.len() + self.payload.len() + self.headers.len() + created + key
    }
}

#[cfg(test)]
mod entry_tests {
    use super::*;
    use std::borrow::Cow;

    /// The entry's fields as the publish script writes them.
    fn fields(event: &StreamEvent) -> Vec<(&'static str, Cow<'_, str>)> {
        let mut fields = vec![
            (field::ID, Cow::Owned(event.id.to_string())),
            (field::TOPIC, Cow::Borrowed(event.topic.as_str())),
            (field::PAYLOAD, Cow::Borrowed(event.payload.as_str())),
            (field::HEADERS, Cow::Borrowed(event.headers.as_str())),
            (
                field::CREATED_AT,
                Cow::Owned(created_at_text(&event.created_at)),
            ),
        ];
        if let Some(key) = &event.key {
            fields.push((field::KEY, Cow::Borrowed(key.as_str())));
        }
        fields
    }

    #[test]
    fn entry_size_is_the_size_of_the_fields() {
        for key in [None, Some("customer-42".to_string())] {
            let event = StreamEvent {
                id: Uuid::new_v4(),
                topic: "orders".into(),
                key,
                payload: r#"{"total":12.5}"#.into(),
                headers: "{}".into(),
                created_at: Utc::now(),
            };
            let built: usize = fields(&event).iter().map(|(k, v)| k.len() + v.len()).sum();
            assert_eq!(event.entry_size(), built);
        }
    }
}

/// What happened to one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Appended now.
    Published,
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
    /// A stream holds less than the relay appended to it; nothing was appended.
    #[error("{0}")]
    Behind(Box<Behind>),
}

/// A stream whose last generated id is below its mark: entries the relay appended are gone.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "stream {stream} of topic {topic} lost entries: it ends at {}, the relay appended up to {mark}",
    last.map_or_else(|| "nothing (no stream)".to_string(), |l| l.to_string())
)]
pub struct Behind {
    /// The topic.
    pub topic: String,
    /// The stream key.
    pub stream: String,
    /// Its partition, of `partitions`.
    pub partition: u32,
    /// The topic's partition count when it was published.
    pub partitions: u32,
    /// The last entry id the relay appended there.
    pub mark: EntryId,
    /// The stream's last generated id now (none: there is no stream).
    pub last: Option<EntryId>,
    /// Its oldest entry now.
    pub first: Option<EntryId>,
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
    /// `redis.wait_replicas`, `redis.wait_fsync`, `redis.wait_timeout`.
    pub durability: Durability,
    /// Spans are exported: traced events go out in publish spans, their headers carrying the
    /// span's context (see `trace`).
    pub traced: bool,
    /// `redis.envelope`, each topic's `envelope` and `redis.cloudevents_source`.
    pub envelopes: Envelopes,
}

/// How a script call names the script.
#[derive(Clone, Copy)]
enum Verb {
    /// By its SHA1, the usual way.
    EvalSha,
    /// With its source, after a NOSCRIPT.
    Eval,
}

/// One script call's content (see [`script`] for KEYS and ARGV).
struct ScriptCall<'a> {
    stream: &'a str,
    topic: &'a str,
    sent: &'a [(&'a StreamEvent, usize)],
    maxlen: u64,
    dedup: [String; 3],
    retired: Option<String>,
    ttl: u64,
    /// The stream's mark, empty when unknown.
    mark: String,
    /// The traced events' spans and headers.
    spans: &'a trace::Spans,
    /// A CloudEvents topic's call: each sent event's `cloudevent` field, in order.
    cloudevents: Option<&'a [String]>,
}

impl ScriptCall<'_> {
    /// The command, as one contiguous buffer: a script invocation would allocate every
    /// argument. Every key shares the stream's slot, so on a cluster it goes to one master.
    fn command(&self, verb: Verb) -> redis::Cmd {
        let [current, previous, next] = &self.dedup;
        let mut cmd = match verb {
            Verb::EvalSha => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script::PUBLISH.get_hash());
                cmd
            }
            Verb::Eval => {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(script::SOURCE.as_str());
                cmd
            }
        };
        cmd.arg(4 + usize::from(self.retired.is_some()))
            .arg(self.stream)
            .arg(current)
            .arg(previous)
            .arg(next);
        if let Some(retired) = &self.retired {
            cmd.arg(retired);
        }
        cmd.arg(self.ttl)
            .arg(self.maxlen)
            .arg(self.sent.len())
            .arg(self.topic)
            .arg(self.mark.as_str())
            .arg(if self.cloudevents.is_some() { "c" } else { "" });
        let mut uuid = Uuid::encode_buffer();
        let mut label = String::with_capacity(8);
        for (index, (event, chain)) in self.sent.iter().enumerate() {
            let created = created_at_text(&event.created_at);
            label.clear();
            let mark = if event.key.is_some() { 'k' } else { 'u' };
            let _ = write!(label, "{mark}{chain}");
            cmd.arg(event.id.as_bytes().as_slice())
                .arg(label.as_str())
                .arg(event.id.hyphenated().encode_lower(&mut uuid) as &str);
            if let Some(bodies) = self.cloudevents {
                let body = bodies.get(index).map_or("", String::as_str);
                cmd.arg(body).arg("").arg("").arg("");
                continue;
            }
            cmd.arg(event.payload.as_str())
                .arg(self.spans.headers(index, event))
                .arg(created.as_str())
                .arg(event.key.as_deref().unwrap_or(""));
        }
        cmd
    }
}

/// The partition of `partitions` an event goes to: its key's
/// ([`outbox_core::partition::for_key`]), so one key's events stay in order in one stream; an
/// unkeyed event's by its (random) id.
pub fn partition_of(key: Option<&str>, id: Uuid, partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    match key {
        Some(key) => partition::for_key(key, partitions),
        None => (id.as_u128() % u128::from(partitions)) as u32,
    }
}

/// One stream of a topic being published.
struct Partition<'a> {
    stream: &'a str,
    index: u32,
    of: u32,
}

/// Writes events into their streams. Cheap to clone: the connection is multiplexed.
#[derive(Clone)]
pub struct Publisher {
    conn: RedisConn,
    config: PublisherConfig,
    /// How far each stream is known to reach.
    marks: Marks,
}

impl Publisher {
    /// A publisher over a (lazily connecting) connection: one server's connection manager or
    /// a cluster connection.
    pub fn new(conn: impl Into<RedisConn>, config: PublisherConfig) -> Self {
        Publisher {
            conn: conn.into(),
            config,
            marks: Marks::default(),
        }
    }

    /// Whether it writes to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// A lazy connection manager for `url` without TLS files (see [`connect::manager`]).
    pub fn connect(url: &str, timeout: Duration) -> Result<ConnectionManager, redis::RedisError> {
        connect::manager(url, timeout)
    }

    /// The settings in force.
    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// How far each stream is known to reach (shared by every clone).
    pub fn marks(&self) -> &Marks {
        &self.marks
    }

    /// Publishes one topic's chains to its `partitions` streams; returns an outcome per event
    /// id, in input order. A keyed chain goes to its key's partition
    /// ([`outbox_core::partition::for_key`]), so one key's events stay in order in one stream;
    /// an unkeyed event goes to the partition its (random) id falls in. Partitions go out one after the
    /// other (on a cluster each may live on another master).
    ///
    /// With `redis.wait_replicas` or `redis.wait_fsync`, it returns only once the writes are
    /// where those ask ([`durability::confirm`]); otherwise the whole call is an outage.
    pub async fn publish(
        &self,
        topic: &str,
        chains: &[Vec<StreamEvent>],
        maxlen: Option<u64>,
        partitions: u32,
    ) -> Result<Vec<(Uuid, Outcome)>, PublishError> {
        let mut reached = Vec::new();
        let outcomes = self
            .append(topic, chains, maxlen, partitions, &mut reached)
            .await?;
        let written = outcomes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Published | Outcome::Duplicate));
        if written {
            durability::confirm(&self.conn, self.config.durability, self.config.timeout).await?;
        }
        // Only confirmed entries count: a stream that lost unconfirmed ones lost nothing
        // marked published.
        for (stream, id) in reached {
            self.marks.reached(&stream, id);
        }
        Ok(outcomes)
    }

    /// Whether Redis can confirm writes as `redis.wait_fsync` asks (see [`durability::check`]).
    pub async fn check_durability(&self) -> Result<(), durability::Unsupported> {
        durability::check(&self.conn, self.config.durability).await
    }

    /// [`Publisher::publish`] without the wait; the last entry appended to each stream goes to
    /// `reached`.
    async fn append(
        &self,
        topic: &str,
        chains: &[Vec<StreamEvent>],
        maxlen: Option<u64>,
        partitions: u32,
        reached: &mut Vec<(String, EntryId)>,
    ) -> Result<Vec<(Uuid, Outcome)>, PublishError> {
        if partitions <= 1 {
            let stream = keys::stream_key(&self.config.stream_prefix, topic);
            let at = Partition {
                stream: &stream,
                index: 0,
                of: 1,
            };
            return self.publish_to(&at, topic, chains, maxlen, reached).await;
        }
        let mut by_partition: BTreeMap<u32, Vec<Vec<StreamEvent>>> = BTreeMap::new();
        for chain in chains {
            let Some(first) = chain.first() else { continue };
            let partition = partition_of(first.key.as_deref(), first.id, partitions);
            by_partition
                .entry(partition)
                .or_default()
                .push(chain.clone());
        }
        let mut outcomes: HashMap<Uuid, Outcome> = HashMap::new();
        for (partition, chains) in by_partition {
            let stream = partition_key(&self.config.stream_prefix, topic, partition, partitions);
            let at = Partition {
                stream: &stream,
                index: partition,
                of: partitions,
            };
            outcomes.extend(
                self.publish_to(&at, topic, &chains, maxlen, reached)
                    .await?,
            );
        }
        Ok(chains
            .iter()
            .flatten()
            .map(|event| {
                let outcome = outcomes.remove(&event.id).unwrap_or(Outcome::Skipped);
                (event.id, outcome)
            })
            .collect())
    }

    /// Publishes chains to one stream; returns an outcome per event id, in input order.
    ///
    /// Which events go in which script call, and what a failure does to the rest of its
    /// chain, is [`plan::CallPlan`]'s; this sends its calls one after the other.
    async fn publish_to(
        &self,
        at: &Partition<'_>,
        topic: &str,
        chains: &[Vec<StreamEvent>],
        maxlen: Option<u64>,
        reached: &mut Vec<(String, EntryId)>,
    ) -> Result<Vec<(Uuid, Outcome)>, PublishError> {
        let maxlen = maxlen.or(self.config.maxlen).unwrap_or(0);
        let cloudevents = self.config.envelopes.of(topic) == Envelope::CloudEvents;
        let body = |event: &StreamEvent| {
            if !cloudevents {
                return Ok(None);
            }
            self.config
                .envelopes
                .cloudevent(event, &event.headers)
                .map(Some)
                .map_err(|e| format!("cannot be written as a CloudEvent: {e}"))
        };
        let mut mark = self.marks.get(at.stream);
        let mut plan = plan::CallPlan::new(chains, self.config.max_payload_bytes, CALL_BYTES);
        while let Some(mut call) = plan.next_call(body) {
            let replies = self
                .send(at, topic, &mut call, maxlen, &mut mark, reached)
                .await?;
            plan.record(&call, replies);
        }
        Ok(plan.outcomes())
    }

    /// Sends one planned call to `at`'s stream; returns its events' outcomes, in order. The
    /// call's last entry raises `mark`, which the next call of the batch checks against, and
    /// goes to `reached`.
    async fn send(
        &self,
        at: &Partition<'_>,
        topic: &str,
        call: &mut plan::Call<'_>,
        maxlen: u64,
        mark: &mut Option<EntryId>,
        reached: &mut Vec<(String, EntryId)>,
    ) -> Result<Vec<Outcome>, PublishError> {
        // Traced events go out in spans of their traces.
        let partition = (at.of > 1).then_some(at.index);
        let spans = trace::Spans::start(at.stream, partition, &call.sent, self.config.traced);
        if let Some(bodies) = call.bodies.as_mut() {
            self.retrace(&call.sent, &spans, bodies);
        }
        let reply = self
            .invoke(
                at.stream,
                topic,
                &call.sent,
                maxlen,
                *mark,
                &spans,
                call.bodies.as_deref(),
            )
            .await;
        spans.finish(&reply);
        match reply? {
            script::Reply::Done(replies, last) => {
                if let Some(last) = last {
                    *mark = Some(last);
                    reached.push((at.stream.to_string(), last));
                }
                Ok(replies)
            }
            script::Reply::Behind { last, first } => Err(PublishError::Behind(Box::new(Behind {
                topic: topic.to_string(),
                stream: at.stream.to_string(),
                partition: at.index,
                partitions: at.of,
                mark: mark.unwrap_or(EntryId { ms: 0, seq: 0 }),
                last,
                first,
            }))),
        }
    }

    /// The `cloudevent` fields of `sent`'s traced events, written again with the
    /// `traceparent` of their publish spans.
    fn retrace(&self, sent: &[(&StreamEvent, usize)], spans: &trace::Spans, bodies: &mut [String]) {
        for (index, ((event, _), body)) in sent.iter().zip(bodies.iter_mut()).enumerate() {
            let Some(headers) = spans.rewritten(index) else {
                continue;
            };
            // The rewritten headers differ from checked ones in one trace id only.
            if let Ok(traced) = self.config.envelopes.cloudevent(event, headers) {
                *body = traced;
            }
        }
    }

    /// One script call: appends `sent` (event, index of its chain) to `stream` with dedup;
    /// every entry's `topic` field is `topic`, sent once; traced events with the headers
    /// `spans` gives them; a CloudEvents topic's events as their `cloudevents` fields.
    #[allow(clippy::too_many_arguments)]
    async fn invoke(
        &self,
        stream: &str,
        topic: &str,
        sent: &[(&StreamEvent, usize)],
        maxlen: u64,
        mark: Option<EntryId>,
        spans: &trace::Spans,
        cloudevents: Option<&[String]>,
    ) -> Result<script::Reply, PublishError> {
        let now = Utc::now().timestamp().max(0) as u64;
        let script_call = ScriptCall {
            stream,
            topic,
            sent,
            maxlen,
            dedup: keys::dedup_keys(stream, self.config.dedup_window, now),
            retired: keys::retired_dedup_key(stream, self.config.dedup_window, now),
            ttl: keys::dedup_ttl_secs(self.config.dedup_window),
            mark: mark.map(|m| m.to_string()).unwrap_or_default(),
            spans,
            cloudevents,
        };
        let cmd = script_call.command(Verb::EvalSha);
        let mut conn = self.conn.clone();
        let call = async {
            match cmd.query_async::<Vec<String>>(&mut conn).await {
                // The node that runs the call has not got the script: a restarted server, a
                // cluster master new to this stream's slot (failover, resharding), or a
                // `SCRIPT FLUSH`. EVAL sends the source to that very node, which caches it
                // for the next EVALSHA (a `SCRIPT LOAD` could land elsewhere on a cluster).
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    script_call
                        .command(Verb::Eval)
                        .query_async::<Vec<String>>(&mut conn)
                        .await
                }
                other => other,
            }
        };
        let replies = match tokio::time::timeout(self.config.timeout, call).await {
            Err(_) => {
                return Err(PublishError::Outage(format!(
                    "no answer within {:?}",
                    self.config.timeout
                )))
            }
            Ok(Err(e)) => match classify_error(&e) {
                Verdict::Outage => return Err(PublishError::Outage(e.to_string())),
                // The whole call was refused for a reason of its content: charge the first
                // event of each chain, skip the rest (their turn comes after it).
                Verdict::EventFault => {
                    let mut charged: HashSet<usize> = HashSet::new();
                    let outcomes = sent
                        .iter()
                        .map(|(_, chain)| {
                            if charged.insert(*chain) {
                                Outcome::Failed(e.to_string())
                            } else {
                                Outcome::Skipped
                            }
                        })
                        .collect();
                    return Ok(script::Reply::Done(outcomes, None));
                }
            },
            Ok(Ok(replies)) => replies,
        };
        script::parse_reply(&replies, sent.len())
    }

    /// Unlinks the retired dedup sets (see [`keys::retired_dedup_keys`]) of each stream of the
    /// topic's `partitions`, which Redis then frees on its background thread; returns how many
    /// existed.
    pub async fn sweep(&self, topic: &str, partitions: u32) -> Result<usize, PublishError> {
        let mut unlinked = 0;
        for stream in partition_keys(&self.config.stream_prefix, topic, partitions) {
            unlinked += self.sweep_stream(&stream).await?;
        }
        Ok(unlinked)
    }

    /// [`Publisher::sweep`] for one stream: its sets share its slot, so one UNLINK.
    async fn sweep_stream(&self, stream: &str) -> Result<usize, PublishError> {
        let now = Utc::now().timestamp().max(0) as u64;
        let retired: Vec<String> =
            keys::retired_dedup_keys(stream, self.config.dedup_window, now).collect();
        if retired.is_empty() {
            return Ok(0);
        }
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("UNLINK");
        cmd.arg(&retired);
        let unlink = cmd.query_async::<usize>(&mut conn);
        match tokio::time::timeout(self.config.timeout, unlink).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(PublishError::Outage(e.to_string())),
            Err(_) => Err(PublishError::Outage("sweep timed out".into())),
        }
    }

    /// Sets the topic's field of the `<prefix>partitions` hash to `partitions`, for consumers
    /// in any language.
    pub async fn record_partitions(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<(), PublishError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(partitions_hash(&self.config.stream_prefix))
            .arg(topic)
            .arg(partitions);
        let set = cmd.query_async::<()>(&mut conn);
        match tokio::time::timeout(self.config.timeout, set).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(PublishError::Outage(e.to_string())),
            Err(_) => Err(PublishError::Outage("HSET partitions timed out".into())),
        }
    }

    /// PING with a short deadline, for readiness. On a cluster the PING goes to every master
    /// and succeeds only if each answers: while one is down, some topics cannot be published.
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
