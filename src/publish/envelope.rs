//! Which envelope each topic's entries are written in, and the `cloudevent` field's text for
//! a topic written as CloudEvents (`outbox_core::cloudevent` writes it, so that the consumer
//! library reads back exactly what the relay wrote).

use std::collections::HashMap;

use outbox_core::cloudevent::{self, Envelope, WriteError};
use outbox_core::entry::field;

use super::StreamEvent;

/// The envelope of every topic: `redis.envelope`, overridden per `[[topics]]` entry.
#[derive(Debug, Clone, Default)]
pub struct Envelopes {
    /// `redis.envelope`.
    pub default: Envelope,
    /// Topics whose `[[topics]]` entry sets an envelope.
    pub topics: HashMap<String, Envelope>,
    /// `redis.cloudevents_source`: every CloudEvent's `source`.
    pub source: String,
}

impl Envelopes {
    /// The envelope `topic`'s entries are written in.
    pub fn of(&self, topic: &str) -> Envelope {
        self.topics.get(topic).copied().unwrap_or(self.default)
    }

    /// The `cloudevent` field of `event`, with `headers` (the event's own, or rewritten by
    /// its publish span).
    pub fn cloudevent(&self, event: &StreamEvent, headers: &str) -> Result<String, WriteError> {
        cloudevent::to_json(&cloudevent::Event {
            id: event.id,
            source: &self.source,
            topic: &event.topic,
            key: event.key.as_deref(),
            payload: &event.payload,
            headers,
            created_at: &event.created_at,
        })
    }
}

/// Bytes of a CloudEvents entry whose `cloudevent` field is `body`: `id` and `cloudevent`.
pub fn entry_size(body: &str) -> usize {
    field::ID.len() + 36 + field::CLOUDEVENT.len() + body.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use uuid::Uuid;

    #[test]
    fn a_listed_topic_keeps_its_own_envelope() {
        let envelopes = Envelopes {
            default: Envelope::CloudEvents,
            topics: HashMap::from([("audit".to_string(), Envelope::Fields)]),
            source: "/shop".into(),
        };
        assert_eq!(envelopes.of("audit"), Envelope::Fields);
        assert_eq!(envelopes.of("orders"), Envelope::CloudEvents);
    }

    #[test]
    fn the_body_names_the_source_and_the_topic() {
        let envelopes = Envelopes {
            source: "/shop".into(),
            ..Envelopes::default()
        };
        let event = StreamEvent {
            id: Uuid::new_v4(),
            topic: "orders".into(),
            key: None,
            payload: "[1]".into(),
            headers: "{}".into(),
            created_at: Utc::now(),
        };
        let body = envelopes.cloudevent(&event, "{}").expect("written");
        let read = cloudevent::parse(&body).expect("read");
        assert_eq!(read.attributes.source, "/shop");
        assert_eq!(read.attributes.ty, "orders");
        assert_eq!(read.attributes.id, event.id.to_string());
        assert_eq!(read.data, serde_json::json!([1]));
        assert_eq!(entry_size(&body), 2 + 36 + 10 + body.len());
    }
}
