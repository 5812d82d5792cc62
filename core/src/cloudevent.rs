//! The CloudEvents envelope (CloudEvents 1.0, JSON event format): the relay writes a topic's
//! entries as `id` + `cloudevent` when the topic's [`Envelope`] says so, and the consumer side
//! reads them back into an [`Entry`](crate::Entry) with their [`CloudEvent`] attributes.
//!
//! Writing and reading live together so that the two cannot drift: the attributes the relay
//! writes are the ones [`parse`] expects, and the round trip is tested here.
//!
//! What the relay writes, for an event of topic `t`: `specversion` `"1.0"`, `id` (the event
//! id), `source` (`redis.cloudevents_source`), `type` (the event's `type` header when it is a
//! text, else the topic), `time` (its `created_at`), `datacontenttype` `"application/json"`,
//! `data` (the payload as JSON), `partitionkey` (the partitioning extension, when the event has
//! a key) and `traceparent` with `tracestate` (the distributed tracing extension, when its
//! headers carry them).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::timestamp::created_at_text;
use crate::trace::{TRACEPARENT, TRACESTATE};

/// The `specversion` written and accepted.
pub const SPECVERSION: &str = "1.0";
/// `redis.cloudevents_source`'s default.
pub const DEFAULT_SOURCE: &str = "/outbox-relay";
/// The `datacontenttype` written: the payload is JSON.
pub const CONTENT_TYPE: &str = "application/json";
/// The header whose text becomes the event's `type`.
pub const TYPE_HEADER: &str = "type";

/// How a topic's entries are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Envelope {
    /// One stream field per part of the event: `id`, `topic`, `payload`, `headers`,
    /// `created_at`, `key` (the stream entry of docs/consumers.md).
    #[default]
    Fields,
    /// `id` and `cloudevent`, the event in the CloudEvents 1.0 JSON format.
    CloudEvents,
}

impl Envelope {
    /// The name used in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Envelope::Fields => "fields",
            Envelope::CloudEvents => "cloudevents",
        }
    }
}

/// Why an event could not be written as a CloudEvent.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The payload is not JSON text.
    #[error("the payload is not JSON: {0}")]
    Payload(serde_json::Error),
    /// The headers are not a JSON object.
    #[error("the headers are not a JSON object: {0}")]
    Headers(serde_json::Error),
}

/// One event as the relay has it, to write as a CloudEvent.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// The event id.
    pub id: Uuid,
    /// `redis.cloudevents_source`.
    pub source: &'a str,
    /// The topic: the `type` when no `type` header says otherwise.
    pub topic: &'a str,
    /// The partition key.
    pub key: Option<&'a str>,
    /// The payload, JSON text.
    pub payload: &'a str,
    /// The headers, JSON text of an object.
    pub headers: &'a str,
    /// When the producer wrote it.
    pub created_at: &'a DateTime<Utc>,
}

/// The headers the envelope carries over; every other header is not part of a CloudEvent.
#[derive(Deserialize)]
struct Carried {
    #[serde(rename = "type")]
    ty: Option<Value>,
    traceparent: Option<Value>,
    tracestate: Option<Value>,
}

/// The JSON object, in the order the specification lists the attributes.
#[derive(Serialize)]
struct Written<'a> {
    specversion: &'static str,
    id: Uuid,
    source: &'a str,
    #[serde(rename = "type")]
    ty: &'a str,
    time: String,
    datacontenttype: &'static str,
    data: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    partitionkey: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<&'a str>,
}

/// A header's value when it is a text.
fn text(value: &Option<Value>) -> Option<&str> {
    match value {
        Some(Value::String(text)) => Some(text.as_str()),
        _ => None,
    }
}

/// The event as CloudEvents 1.0 JSON text.
pub fn to_json(event: &Event<'_>) -> Result<String, WriteError> {
    let data: &RawValue = serde_json::from_str(event.payload).map_err(WriteError::Payload)?;
    let carried: Carried = serde_json::from_str(event.headers).map_err(WriteError::Headers)?;
    let ty = match &carried.ty {
        Some(Value::String(ty)) if !ty.is_empty() => ty.as_str(),
        _ => event.topic,
    };
    let traceparent = text(&carried.traceparent);
    let tracestate = traceparent.and(text(&carried.tracestate));
    let written = Written {
        specversion: SPECVERSION,
        id: event.id,
        source: event.source,
        ty,
        time: created_at_text(event.created_at),
        datacontenttype: CONTENT_TYPE,
        data,
        partitionkey: event.key,
        traceparent,
        tracestate,
    };
    // Every part is a string, a uuid or JSON already checked: serializing cannot fail.
    serde_json::to_string(&written).map_err(WriteError::Payload)
}

/// A CloudEvent's context attributes, as a consumer reads them from an entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CloudEvent {
    /// `specversion` (`"1.0"`).
    pub specversion: String,
    /// `id`.
    pub id: String,
    /// `source`.
    pub source: String,
    /// `type`.
    #[serde(rename = "type")]
    pub ty: String,
    /// `time`, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<DateTime<Utc>>,
    /// `datacontenttype`, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub datacontenttype: Option<String>,
    /// `subject`, when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// `partitionkey` (the partitioning extension), when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitionkey: Option<String>,
    /// `traceparent` (the distributed tracing extension), when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `tracestate` (the distributed tracing extension), when present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Every other extension attribute.
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}

/// Why a `cloudevent` field is not a CloudEvent this library reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Not JSON, or an attribute of the wrong type.
    #[error("not a CloudEvents JSON object: {0}")]
    Json(String),
    /// A required attribute is absent.
    #[error("attribute `{0}` is missing")]
    Missing(&'static str),
    /// `specversion` is not 1.0.
    #[error("specversion {0:?} is not 1.0")]
    Version(String),
    /// `time` is not RFC 3339.
    #[error("attribute `time` is not an RFC 3339 time: {0}")]
    Time(String),
    /// The data is base64 (`data_base64`): this relay never writes it, the library reads JSON.
    #[error("attribute `data_base64`: binary data is not read, only JSON `data`")]
    Binary,
}

/// The JSON object as the specification allows it (attributes of the wrong type refused).
#[derive(Deserialize)]
struct Wire {
    specversion: Option<String>,
    id: Option<String>,
    source: Option<String>,
    #[serde(rename = "type")]
    ty: Option<String>,
    time: Option<String>,
    datacontenttype: Option<String>,
    subject: Option<String>,
    partitionkey: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    data: Option<Value>,
    data_base64: Option<Value>,
    #[serde(flatten)]
    extensions: Map<String, Value>,
}

/// A CloudEvent read: its attributes and its data (JSON `null` when it has none).
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// The context attributes.
    pub attributes: CloudEvent,
    /// `data`.
    pub data: Value,
}

/// Reads a `cloudevent` field's text.
pub fn parse(text: &str) -> Result<Read, ReadError> {
    let wire: Wire = serde_json::from_str(text).map_err(|e| ReadError::Json(e.to_string()))?;
    let specversion = wire.specversion.ok_or(ReadError::Missing("specversion"))?;
    if specversion != SPECVERSION {
        return Err(ReadError::Version(specversion));
    }
    if wire.data_base64.is_some() {
        return Err(ReadError::Binary);
    }
    let time = wire
        .time
        .map(|t| {
            DateTime::parse_from_rfc3339(&t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ReadError::Time(t))
        })
        .transpose()?;
    Ok(Read {
        attributes: CloudEvent {
            specversion,
            id: wire.id.ok_or(ReadError::Missing("id"))?,
            source: wire.source.ok_or(ReadError::Missing("source"))?,
            ty: wire.ty.ok_or(ReadError::Missing("type"))?,
            time,
            datacontenttype: wire.datacontenttype,
            subject: wire.subject,
            partitionkey: wire.partitionkey,
            traceparent: wire.traceparent,
            tracestate: wire.tracestate,
            extensions: wire.extensions,
        },
        data: wire.data.unwrap_or(Value::Null),
    })
}

/// The headers an entry read from a CloudEvent shows: `type` when it is not the topic (it came
/// from the producer's `type` header), `traceparent` and `tracestate`, so that a handler reads them as it
/// would from an entry of the default envelope.
pub fn headers_of(attributes: &CloudEvent, topic: &str) -> Value {
    let mut headers = Map::new();
    if attributes.ty != topic {
        headers.insert(TYPE_HEADER.into(), Value::String(attributes.ty.clone()));
    }
    if let Some(tp) = &attributes.traceparent {
        headers.insert(TRACEPARENT.into(), Value::String(tp.clone()));
    }
    if let Some(ts) = &attributes.tracestate {
        headers.insert(TRACESTATE.into(), Value::String(ts.clone()));
    }
    Value::Object(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event<'a>(headers: &'a str, key: Option<&'a str>, at: &'a DateTime<Utc>) -> Event<'a> {
        Event {
            id: Uuid::from_u128(0x6f0c_1c52_4c8b_4a53_9a0e_2f3c_1a1b_2c3d),
            source: DEFAULT_SOURCE,
            topic: "order.created",
            key,
            payload: r#"{"order_id":42,"note":"a \"quoted\" word"}"#,
            headers,
            created_at: at,
        }
    }

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-02T13:57:01.123456Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn writes_every_attribute_the_contract_names() {
        let at = at();
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let headers = format!(
            r#"{{"type":"com.shop.order.created","traceparent":"{tp}","tracestate":"k=v","x":1}}"#
        );
        let text = to_json(&event(&headers, Some("order-42"), &at)).expect("written");
        let json: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "specversion": "1.0",
                "id": "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d",
                "source": "/outbox-relay",
                "type": "com.shop.order.created",
                "time": "2026-12-02T13:57:01.123456Z",
                "datacontenttype": "application/json",
                "data": {"order_id": 42, "note": "a \"quoted\" word"},
                "partitionkey": "order-42",
                "traceparent": tp,
                "tracestate": "k=v",
            })
        );
    }

    #[test]
    fn the_topic_is_the_type_without_a_text_type_header() {
        let at = at();
        for headers in ["{}", r#"{"type":7}"#, r#"{"type":""}"#] {
            let text = to_json(&event(headers, None, &at)).expect("written");
            let json: Value = serde_json::from_str(&text).expect("json");
            assert_eq!(json["type"], "order.created", "headers {headers}");
            assert!(json.get("partitionkey").is_none());
            assert!(json.get("traceparent").is_none());
        }
    }

    #[test]
    fn bad_parts_are_refused_not_written() {
        let at = at();
        let mut e = event("{}", None, &at);
        e.payload = "{not json";
        assert!(matches!(to_json(&e), Err(WriteError::Payload(_))));
        let e = event("[1]", None, &at);
        assert!(matches!(to_json(&e), Err(WriteError::Headers(_))));
    }

    #[test]
    fn what_is_written_reads_back() {
        let at = at();
        let headers = r#"{"type":"com.shop.order.created"}"#;
        let text = to_json(&event(headers, Some("order-42"), &at)).expect("written");
        let read = parse(&text).expect("read");
        assert_eq!(read.data["order_id"], 42);
        let attrs = &read.attributes;
        assert_eq!(attrs.id, "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d");
        assert_eq!(attrs.source, DEFAULT_SOURCE);
        assert_eq!(attrs.ty, "com.shop.order.created");
        assert_eq!(attrs.time, Some(at));
        assert_eq!(attrs.datacontenttype.as_deref(), Some(CONTENT_TYPE));
        assert_eq!(attrs.partitionkey.as_deref(), Some("order-42"));
        assert!(attrs.extensions.is_empty());
        assert_eq!(
            headers_of(attrs, "order.created"),
            serde_json::json!({"type": "com.shop.order.created"})
        );
    }

    #[test]
    fn foreign_cloudevents_read_with_their_extensions() {
        let read = parse(
            r#"{"specversion":"1.0","id":"a1","source":"/x","type":"t","subject":"s","region":"eu"}"#,
        )
        .expect("read");
        assert_eq!(read.data, Value::Null);
        assert_eq!(read.attributes.subject.as_deref(), Some("s"));
        assert_eq!(read.attributes.extensions["region"], "eu");
        assert_eq!(read.attributes.time, None);
    }

    #[test]
    fn malformed_cloudevents_say_why() {
        assert!(matches!(parse("{"), Err(ReadError::Json(_))));
        assert_eq!(
            parse(r#"{"id":"a","source":"/x","type":"t"}"#),
            Err(ReadError::Missing("specversion"))
        );
        assert_eq!(
            parse(r#"{"specversion":"0.3","id":"a","source":"/x","type":"t"}"#),
            Err(ReadError::Version("0.3".into()))
        );
        assert_eq!(
            parse(r#"{"specversion":"1.0","id":"a","type":"t"}"#),
            Err(ReadError::Missing("source"))
        );
        assert_eq!(
            parse(r#"{"specversion":"1.0","id":"a","source":"/x","type":"t","time":"noon"}"#),
            Err(ReadError::Time("noon".into()))
        );
        assert_eq!(
            parse(
                r#"{"specversion":"1.0","id":"a","source":"/x","type":"t","data_base64":"AA=="}"#
            ),
            Err(ReadError::Binary)
        );
        assert!(matches!(
            parse(r#"{"specversion":"1.0","id":5,"source":"/x","type":"t"}"#),
            Err(ReadError::Json(_))
        ));
    }
}
