//! An adopted table as the relay knows it: an existing outbox table (Debezium's layout, or a
//! team's own) and which of its columns make an event (contract section 12). A leaf, shared
//! by the settings (`config`, `[[tables]]`) and the SQL that prepares the table (`db::adopted`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The placeholder `topic_format` replaces with the topic column's value.
pub const TOPIC_PLACEHOLDER: &str = "{}";

/// One adopted table: which of its columns make an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// The table, optionally schema-qualified (`public.outboxevent`).
    pub name: String,
    /// The event id's column: a `uuid` is the id; any other type gives each row a stable UUID
    /// derived from the table name and that value.
    pub id: String,
    /// The column whose value names the topic.
    pub topic: String,
    /// The topic is this text with `{}` replaced by the topic column's value.
    #[serde(default = "plain_topic")]
    pub topic_format: String,
    /// The partition key's column, if any.
    #[serde(default)]
    pub key: Option<String>,
    /// The payload's column: `jsonb` or `json` as is; text holding JSON as that JSON, other
    /// text as a JSON string.
    pub payload: String,
    /// Header name to column: each column's value copied into the event's headers as text.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A `timestamptz` column used as the event's `created_at` (else the insert's time).
    #[serde(default)]
    pub created_at: Option<String>,
}

fn plain_topic() -> String {
    TOPIC_PLACEHOLDER.to_string()
}

impl TableSpec {
    /// A table whose columns `id`, `topic` and `payload` make its events (the rest unset).
    pub fn new(name: &str, id: &str, topic: &str, payload: &str) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            id: id.to_string(),
            topic: topic.to_string(),
            topic_format: plain_topic(),
            key: None,
            payload: payload.to_string(),
            headers: BTreeMap::new(),
            created_at: None,
        }
    }

    /// The table's name split into its schema (if given) and the table.
    pub fn schema_and_table(&self) -> (Option<&str>, &str) {
        match self.name.split_once('.') {
            Some((schema, table)) => (Some(schema), table),
            None => (None, self.name.as_str()),
        }
    }

    /// Every column the entry names, with the key naming it (for messages).
    pub fn columns(&self) -> Vec<(String, &str)> {
        let mut out = vec![
            ("id".to_string(), self.id.as_str()),
            ("topic".to_string(), self.topic.as_str()),
            ("payload".to_string(), self.payload.as_str()),
        ];
        out.extend(self.key.as_deref().map(|c| ("key".to_string(), c)));
        out.extend(
            self.created_at
                .as_deref()
                .map(|c| ("created_at".to_string(), c)),
        );
        out.extend(
            self.headers
                .iter()
                .map(|(h, c)| (format!("headers.{h}"), c.as_str())),
        );
        out
    }
}
