//! The stream entry's format (docs/consumers.md, "The stream entry"): the field names the relay
//! writes (the text of `created_at` is [`crate::timestamp`]'s), and [`Entry`], one event parsed
//! from the raw fields of an XREAD / XREADGROUP / XRANGE reply, with its JSON form for
//! `outbox-relay tail`. An entry of a topic with the CloudEvents envelope (`id` + `cloudevent`,
//! see [`crate::cloudevent`]) parses into the same [`Entry`], its attributes in
//! [`Entry::cloudevent`].
//!
//! Parsing never panics: a malformed entry is an [`EntryError`] naming the field, so the
//! consumer can move it to the dead stream instead of stopping on it.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use redis::Value;
use serde::{Serialize, Serializer};
use uuid::Uuid;

use crate::cloudevent::{self, CloudEvent};
use crate::timestamp::created_at_text;

/// The names of an entry's fields, in the order the relay writes them (`key` only when the
/// event has a partition key).
pub mod field {
    /// The event's uuid.
    pub const ID: &str = "id";
    /// The topic.
    pub const TOPIC: &str = "topic";
    /// The payload, JSON text.
    pub const PAYLOAD: &str = "payload";
    /// The headers, JSON text (an object).
    pub const HEADERS: &str = "headers";
    /// When the producer wrote the event: see [`created_at_text`](crate::timestamp::created_at_text).
    pub const CREATED_AT: &str = "created_at";
    /// The partition key; absent when the event has none.
    pub const KEY: &str = "key";
    /// The event as CloudEvents 1.0 JSON, beside `id`, in place of the fields above on a topic
    /// with the CloudEvents envelope.
    pub const CLOUDEVENT: &str = "cloudevent";
}

/// An event read from its topic's stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// The Redis stream entry id (`1764683821123-0`), what XACK takes.
    pub stream_id: String,
    /// The event's id (the `id` field): the key to deduplicate on.
    pub id: Uuid,
    /// The topic (the `topic` field).
    pub topic: String,
    /// The partition key (the `key` field); `None` when the event has none.
    pub key: Option<String>,
    /// The payload, parsed from its JSON text.
    pub payload: serde_json::Value,
    /// The headers, parsed from their JSON text.
    pub headers: serde_json::Value,
    /// When the producer wrote the event.
    #[serde(serialize_with = "rfc3339_micros")]
    pub created_at: DateTime<Utc>,
    /// How many times the group has delivered this entry, this delivery included (1 the first
    /// time). Not part of the JSON form: it is the group's, not the event's.
    #[serde(skip)]
    pub deliveries: u64,
    /// The consumer group it was delivered to; empty when read outside a group (`tail`
    /// without `--group`). Not part of the JSON form either.
    #[serde(skip)]
    pub group: Arc<str>,
    /// The lease under which this consumer handles the entry, for a partitioned topic whose
    /// partitions the group's consumers divide: the partition and its fencing epoch. An
    /// effect stored elsewhere can be fenced with it (refuse a write whose epoch is lower than
    /// the highest seen for the partition); the inbox does. `None` for a topic with one
    /// stream, or read outside a group.
    #[serde(skip)]
    pub lease: Option<Lease>,
    /// The CloudEvents attributes, for an entry of a topic with the CloudEvents envelope (the
    /// `cloudevent` field); `None` for the default envelope. Its `data` is [`Entry::payload`],
    /// its `partitionkey` [`Entry::key`], its `time` [`Entry::created_at`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloudevent: Option<Box<CloudEvent>>,
}

/// A consumer's hold on one partition of a topic: handed out by the group's fleet, raised by
/// each new owner, so a higher epoch always means a later owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The partition (0-based).
    pub partition: u32,
    /// The fencing epoch: incremented each time a consumer takes the partition.
    pub epoch: u64,
}

/// Why a stream entry is not a well-formed outbox event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// A required field is absent.
    #[error("field `{0}` is missing")]
    Missing(&'static str),
    /// A field's value is not a UTF-8 string.
    #[error("field `{0}` is not UTF-8 text")]
    NotText(String),
    /// The `id` field is not a uuid.
    #[error("field `id` is not a uuid: {0}")]
    Id(String),
    /// `payload` or `headers` is not JSON.
    #[error("field `{field}` is not JSON: {error}")]
    Json {
        /// `payload` or `headers`.
        field: &'static str,
        /// The parser's message.
        error: String,
    },
    /// `created_at` is not RFC 3339.
    #[error("field `created_at` is not an RFC 3339 time: {0}")]
    CreatedAt(String),
    /// The `cloudevent` field is not a CloudEvent this library reads.
    #[error("field `cloudevent`: {0}")]
    CloudEvent(#[from] cloudevent::ReadError),
    /// The `cloudevent`'s `id` is not the entry's `id` field.
    #[error("field `cloudevent`: its id {attribute:?} is not the entry's id {field}")]
    CloudEventId {
        /// The `id` field.
        field: Uuid,
        /// The cloudevent's `id` attribute.
        attribute: String,
    },
}

impl EntryError {
    /// A stable code for the kind of error, the same in every client of the protocol
    /// (docs/protocol.md; `consumer/protocol/golden/entries.json` lists each with its cases):
    /// compare codes, not messages.
    pub fn code(&self) -> &'static str {
        use cloudevent::ReadError;
        match self {
            EntryError::Missing(_) => "missing_field",
            EntryError::NotText(_) => "not_text",
            EntryError::Id(_) => "bad_id",
            EntryError::Json { .. } => "bad_json",
            EntryError::CreatedAt(_) => "bad_created_at",
            EntryError::CloudEventId { .. } => "cloudevent_id_mismatch",
            EntryError::CloudEvent(read) => match read {
                ReadError::Json(_) => "cloudevent_not_json",
                ReadError::Missing(_) => "cloudevent_missing_attribute",
                ReadError::Version(_) => "cloudevent_bad_specversion",
                ReadError::Time(_) => "cloudevent_bad_time",
                ReadError::Binary => "cloudevent_binary_data",
            },
        }
    }
}

impl Entry {
    /// Parses an entry from its fields (as a `HashMap<String, Value>` of a
    /// [`redis::streams::StreamId`], or pairs), with `deliveries` set to 1. Unknown fields are
    /// ignored, so the relay may add some later. A CloudEvents entry carries no `topic` field:
    /// read it with [`Entry::from_fields_of`], which knows the topic of the stream it came from.
    pub fn from_fields<'a, I, K>(
        stream_id: impl Into<String>,
        fields: I,
    ) -> Result<Entry, EntryError>
    where
        I: IntoIterator<Item = (K, &'a Value)>,
        K: AsRef<str>,
    {
        Entry::read(None, stream_id.into(), fields)
    }

    /// [`Entry::from_fields`] for an entry read from `topic`'s stream: a CloudEvents entry's
    /// topic.
    pub fn from_fields_of<'a, I, K>(
        topic: &str,
        stream_id: impl Into<String>,
        fields: I,
    ) -> Result<Entry, EntryError>
    where
        I: IntoIterator<Item = (K, &'a Value)>,
        K: AsRef<str>,
    {
        Entry::read(Some(topic), stream_id.into(), fields)
    }

    fn read<'a, I, K>(
        topic: Option<&str>,
        stream_id: String,
        fields: I,
    ) -> Result<Entry, EntryError>
    where
        I: IntoIterator<Item = (K, &'a Value)>,
        K: AsRef<str>,
    {
        let mut text: HashMap<String, String> = HashMap::new();
        for (name, value) in fields {
            let name = name.as_ref();
            if ![
                field::ID,
                field::TOPIC,
                field::KEY,
                field::PAYLOAD,
                field::HEADERS,
                field::CREATED_AT,
                field::CLOUDEVENT,
            ]
            .contains(&name)
            {
                continue;
            }
            let value = value_text(value).ok_or_else(|| EntryError::NotText(name.to_string()))?;
            text.insert(name.to_string(), value);
        }
        let mut take = |name: &'static str| text.remove(name).ok_or(EntryError::Missing(name));
        let id = take(field::ID)?;
        let id = Uuid::parse_str(&id).map_err(|_| EntryError::Id(id))?;
        if let Ok(event) = take(field::CLOUDEVENT) {
            let topic = match take(field::TOPIC) {
                Ok(topic) => topic,
                Err(missing) => topic.map(str::to_string).ok_or(missing)?,
            };
            return Entry::read_cloudevent(stream_id, id, topic, &event);
        }
        let topic = take(field::TOPIC)?;
        let payload = json(&take(field::PAYLOAD)?, field::PAYLOAD)?;
        let headers = json(&take(field::HEADERS)?, field::HEADERS)?;
        let created_at = take(field::CREATED_AT)?;
        let created_at = DateTime::parse_from_rfc3339(&created_at)
            .map_err(|_| EntryError::CreatedAt(created_at))?
            .with_timezone(&Utc);
        let key = text.remove(field::KEY);
        Ok(Entry {
            stream_id,
            id,
            topic,
            key,
            payload,
            headers,
            created_at,
            deliveries: 1,
            group: Arc::from(""),
            lease: None,
            cloudevent: None,
        })
    }

    /// An entry of the CloudEvents envelope: the event is the `cloudevent` field's.
    fn read_cloudevent(
        stream_id: String,
        id: Uuid,
        topic: String,
        event: &str,
    ) -> Result<Entry, EntryError> {
        let read = cloudevent::parse(event)?;
        let attributes = read.attributes;
        if Uuid::parse_str(&attributes.id).ok() != Some(id) {
            return Err(EntryError::CloudEventId {
                field: id,
                attribute: attributes.id,
            });
        }
        let created_at = attributes
            .time
            .ok_or(cloudevent::ReadError::Missing("time"))?;
        Ok(Entry {
            stream_id,
            id,
            key: attributes.partitionkey.clone(),
            payload: read.data,
            headers: cloudevent::headers_of(&attributes, &topic),
            topic,
            created_at,
            deliveries: 1,
            group: Arc::from(""),
            lease: None,
            cloudevent: Some(Box::new(attributes)),
        })
    }

    /// Parses an entry from its fields as pairs, e.g. `&[(String, Value)]`.
    pub fn from_pairs(
        stream_id: impl Into<String>,
        fields: &[(String, Value)],
    ) -> Result<Entry, EntryError> {
        Entry::from_fields(stream_id, fields.iter().map(|(k, v)| (k, v)))
    }

    /// [`Entry::from_pairs`] for an entry read from `topic`'s stream (see
    /// [`Entry::from_fields_of`]).
    pub fn from_pairs_of(
        topic: &str,
        stream_id: impl Into<String>,
        fields: &[(String, Value)],
    ) -> Result<Entry, EntryError> {
        Entry::from_fields_of(topic, stream_id, fields.iter().map(|(k, v)| (k, v)))
    }

    /// Parses one entry of a [`redis::streams::StreamReadReply`] or
    /// [`redis::streams::StreamRangeReply`].
    pub fn from_stream_id(entry: &redis::streams::StreamId) -> Result<Entry, EntryError> {
        Entry::from_fields(entry.id.clone(), &entry.map)
    }

    /// [`Entry::from_stream_id`] for an entry read from `topic`'s stream (see
    /// [`Entry::from_fields_of`]).
    pub fn from_stream_id_of(
        topic: &str,
        entry: &redis::streams::StreamId,
    ) -> Result<Entry, EntryError> {
        Entry::from_fields_of(topic, entry.id.clone(), &entry.map)
    }

    /// Every entry of a raw `XREAD`/`XREADGROUP` reply, in stream order (per stream), each
    /// parsed or with its error; the reply itself not being a stream reply is the outer error.
    #[allow(clippy::type_complexity)]
    pub fn from_read_reply(
        reply: Value,
    ) -> Result<Vec<(String, Result<Entry, EntryError>)>, redis::RedisError> {
        let reply: redis::streams::StreamReadReply = redis::from_redis_value(reply)?;
        Ok(reply
            .keys
            .iter()
            .flat_map(|key| key.ids.iter())
            .map(|id| (id.id.clone(), Entry::from_stream_id(id)))
            .collect())
    }

    /// The payload as a `T`: `let order: Order = entry.payload_as()?;`. A payload that does not
    /// fit will not fit on the next delivery either: a consumer's handler usually dead-letters
    /// such an entry.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.payload)
    }

    /// The JSON object `tail` prints: `{"stream_id","id","topic","key","payload","headers",
    /// "created_at"}`, payload and headers as JSON values, and `cloudevent` (the attributes)
    /// for an entry of the CloudEvents envelope.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "stream_id": self.stream_id,
            "id": self.id,
            "topic": self.topic,
            "key": self.key,
            "payload": self.payload,
            "headers": self.headers,
            "created_at": created_at_text(&self.created_at),
        });
        if let (Some(attributes), Some(object)) = (&self.cloudevent, json.as_object_mut()) {
            object.insert(
                field::CLOUDEVENT.into(),
                serde_json::to_value(attributes).unwrap_or(serde_json::Value::Null),
            );
        }
        json
    }
}

/// A field value as text, if Redis sent text.
pub fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn json(text: &str, field: &'static str) -> Result<serde_json::Value, EntryError> {
    serde_json::from_str(text).map_err(|e| EntryError::Json {
        field,
        error: e.to_string(),
    })
}

fn rfc3339_micros<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&created_at_text(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn good() -> Vec<(String, Value)> {
        vec![
            ("id".into(), bulk("6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d")),
            ("topic".into(), bulk("order.created")),
            ("payload".into(), bulk(r#"{"order_id":42}"#)),
            ("headers".into(), bulk(r#"{"trace":"t1"}"#)),
            ("created_at".into(), bulk("2026-12-02T13:57:01.123456Z")),
            ("key".into(), bulk("order-42")),
        ]
    }

    fn parse(fields: &[(String, Value)]) -> Result<Entry, EntryError> {
        Entry::from_pairs("1-0", fields)
    }

    #[test]
    fn parses_a_relay_entry() {
        let e = parse(&good()).expect("well-formed");
        assert_eq!(e.stream_id, "1-0");
        assert_eq!(e.topic, "order.created");
        assert_eq!(e.key.as_deref(), Some("order-42"));
        assert_eq!(e.payload["order_id"], 42);
        assert_eq!(e.headers["trace"], "t1");
        assert_eq!(e.deliveries, 1);
        assert_eq!(
            e.to_json()["created_at"],
            serde_json::json!("2026-12-02T13:57:01.123456Z")
        );
    }

    #[test]
    fn the_payload_reads_as_a_type() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Order {
            order_id: u32,
        }
        let e = parse(&good()).expect("well-formed");
        assert_eq!(e.payload_as::<Order>().ok(), Some(Order { order_id: 42 }));
        assert!(e.payload_as::<Vec<u8>>().is_err());
    }

    #[test]
    fn the_key_is_optional_and_unknown_fields_ignored() {
        let mut fields = good();
        fields.retain(|(k, _)| k != "key");
        fields.push(("extra".into(), Value::Int(3)));
        let e = parse(&fields).expect("no key is fine");
        assert_eq!(e.key, None);
        assert_eq!(e.to_json()["key"], serde_json::Value::Null);
    }

    #[test]
    fn a_hash_map_works_too() {
        let map: HashMap<String, Value> = good().into_iter().collect();
        assert!(Entry::from_fields("1-0", &map).is_ok());
    }

    #[test]
    fn malformed_entries_say_which_field() {
        let with = |name: &str, value: Value| {
            let mut f = good();
            f.retain(|(k, _)| k != name);
            f.push((name.to_string(), value));
            parse(&f)
        };
        let mut missing = good();
        missing.retain(|(k, _)| k != "payload");
        assert_eq!(parse(&missing), Err(EntryError::Missing("payload")));
        assert_eq!(
            with("id", bulk("not-a-uuid")),
            Err(EntryError::Id("not-a-uuid".into()))
        );
        assert!(matches!(
            with("payload", bulk("{not json")),
            Err(EntryError::Json {
                field: "payload",
                ..
            })
        ));
        assert!(matches!(
            with("headers", bulk("")),
            Err(EntryError::Json {
                field: "headers",
                ..
            })
        ));
        assert_eq!(
            with("created_at", bulk("yesterday")),
            Err(EntryError::CreatedAt("yesterday".into()))
        );
        assert_eq!(
            with("topic", Value::BulkString(vec![0xff, 0xfe])),
            Err(EntryError::NotText("topic".into()))
        );
    }

    #[test]
    fn serializes_to_the_tail_object() {
        let e = parse(&good()).expect("well-formed");
        let via_serde = serde_json::to_value(&e).expect("serialize");
        assert_eq!(via_serde, e.to_json());
        let keys: Vec<&str> = via_serde
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = vec![
            "stream_id",
            "id",
            "topic",
            "key",
            "payload",
            "headers",
            "created_at",
        ];
        let mut got = keys.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    fn cloudevent_fields(id: &str) -> Vec<(String, Value)> {
        let at = DateTime::parse_from_rfc3339("2026-12-02T13:57:01.123456Z")
            .expect("time")
            .with_timezone(&Utc);
        let event = crate::cloudevent::Event {
            id: Uuid::parse_str("6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d").expect("uuid"),
            source: "/shop",
            topic: "order.created",
            key: Some("order-42"),
            payload: r#"{"order_id":42}"#,
            headers: r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
            created_at: &at,
        };
        let text = crate::cloudevent::to_json(&event).expect("written");
        vec![("id".into(), bulk(id)), ("cloudevent".into(), bulk(&text))]
    }

    #[test]
    fn a_cloudevents_entry_reads_like_any_other() {
        let fields = cloudevent_fields("6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d");
        let e = Entry::from_pairs_of("order.created", "1-0", &fields).expect("well-formed");
        let plain = parse(&good()).expect("well-formed");
        assert_eq!(
            (e.id, &e.topic, &e.key),
            (plain.id, &plain.topic, &plain.key)
        );
        assert_eq!(e.payload, plain.payload);
        assert_eq!(e.created_at, plain.created_at);
        assert_eq!(
            e.headers["traceparent"],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        let attributes = e.cloudevent.as_deref().expect("attributes");
        assert_eq!(attributes.source, "/shop");
        assert_eq!(attributes.ty, "order.created");
        assert_eq!(e.to_json()["cloudevent"]["source"], "/shop");
        assert_eq!(e.to_json()["payload"]["order_id"], 42);
    }

    #[test]
    fn a_cloudevents_entry_needs_its_topic_and_its_own_id() {
        let fields = cloudevent_fields("6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d");
        assert_eq!(parse(&fields), Err(EntryError::Missing("topic")));
        let other = cloudevent_fields("00000000-4c8b-4a53-9a0e-2f3c1a1b2c3d");
        assert!(matches!(
            Entry::from_pairs_of("order.created", "1-0", &other),
            Err(EntryError::CloudEventId { .. })
        ));
        let broken = vec![
            ("id".into(), bulk("6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d")),
            ("cloudevent".into(), bulk(r#"{"specversion":"1.0"}"#)),
        ];
        assert_eq!(
            Entry::from_pairs_of("order.created", "1-0", &broken),
            Err(EntryError::CloudEvent(
                crate::cloudevent::ReadError::Missing("id")
            ))
        );
    }

    #[test]
    fn parses_a_raw_xread_reply() {
        let entry = Value::Array(vec![
            bulk("5-0"),
            Value::Array(
                good()
                    .into_iter()
                    .flat_map(|(k, v)| [bulk(&k), v])
                    .collect(),
            ),
        ]);
        let bad = Value::Array(vec![bulk("6-0"), Value::Array(vec![bulk("id"), bulk("x")])]);
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("outbox:order.created"),
            Value::Array(vec![entry, bad]),
        ])]);
        let parsed = Entry::from_read_reply(reply).expect("a stream reply");
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, "5-0");
        assert_eq!(
            parsed[0].1.as_ref().map(|e| e.stream_id.as_str()),
            Ok("5-0")
        );
        assert_eq!(parsed[1].1, Err(EntryError::Id("x".into())));
    }
}
