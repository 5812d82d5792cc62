//! One stream entry as the relay writes it (CONTRACT section 4), parsed from the raw fields of
//! an XREAD / XREADGROUP / XRANGE reply, and its JSON form for `outbox-relay tail`.
//!
//! Parsing never panics: a malformed entry is an [`EntryError`] naming the field, so the
//! consumer can move it to the dead stream instead of stopping on it.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, Utc};
use redis::Value;
use serde::{Serialize, Serializer};
use uuid::Uuid;

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
}

impl Entry {
    /// Parses an entry from its fields (as a `HashMap<String, Value>` of a
    /// [`redis::streams::StreamId`], or pairs), with `deliveries` set to 1. Unknown fields are
    /// ignored, so the relay may add some later.
    pub fn from_fields<'a, I, K>(
        stream_id: impl Into<String>,
        fields: I,
    ) -> Result<Entry, EntryError>
    where
        I: IntoIterator<Item = (K, &'a Value)>,
        K: AsRef<str>,
    {
        let mut text: HashMap<String, String> = HashMap::new();
        for (name, value) in fields {
            let name = name.as_ref();
            if !matches!(
                name,
                "id" | "topic" | "key" | "payload" | "headers" | "created_at"
            ) {
                continue;
            }
            let value = value_text(value).ok_or_else(|| EntryError::NotText(name.to_string()))?;
            text.insert(name.to_string(), value);
        }
        let mut take = |name: &'static str| text.remove(name).ok_or(EntryError::Missing(name));
        let id = take("id")?;
        let id = Uuid::parse_str(&id).map_err(|_| EntryError::Id(id))?;
        let topic = take("topic")?;
        let payload = json(&take("payload")?, "payload")?;
        let headers = json(&take("headers")?, "headers")?;
        let created_at = take("created_at")?;
        let created_at = DateTime::parse_from_rfc3339(&created_at)
            .map_err(|_| EntryError::CreatedAt(created_at))?
            .with_timezone(&Utc);
        let key = text.remove("key");
        Ok(Entry {
            stream_id: stream_id.into(),
            id,
            topic,
            key,
            payload,
            headers,
            created_at,
            deliveries: 1,
        })
    }

    /// Parses an entry from its fields as pairs, e.g. `&[(String, Value)]`.
    pub fn from_pairs(
        stream_id: impl Into<String>,
        fields: &[(String, Value)],
    ) -> Result<Entry, EntryError> {
        Entry::from_fields(stream_id, fields.iter().map(|(k, v)| (k, v)))
    }

    /// Parses one entry of a [`redis::streams::StreamReadReply`] or
    /// [`redis::streams::StreamRangeReply`].
    pub fn from_stream_id(entry: &redis::streams::StreamId) -> Result<Entry, EntryError> {
        Entry::from_fields(entry.id.clone(), &entry.map)
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

    /// The JSON object `tail` prints: `{"stream_id","id","topic","key","payload","headers",
    /// "created_at"}`, payload and headers as JSON values.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "stream_id": self.stream_id,
            "id": self.id,
            "topic": self.topic,
            "key": self.key,
            "payload": self.payload,
            "headers": self.headers,
            "created_at": self.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        })
    }
}

/// A field value as text, if Redis sent text.
pub(crate) fn value_text(value: &Value) -> Option<String> {
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
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true))
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
