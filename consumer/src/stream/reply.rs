//! Parsing read replies by hand, where the crate's types would lose the field order (a dead
//! letter keeps the original fields in their order) or choke on a deleted entry's nil.

use std::sync::Arc;

use redis::Value;

use super::RawEntry;
use outbox_core::entry::value_text;

/// The entries of an XREADGROUP reply (RESP2 arrays or a RESP3 map), stream after stream,
/// each stream's in order; `keys` are the streams asked for (their names are shared, not
/// copied per entry).
pub(crate) fn parse_read_reply(reply: Value, keys: &[Arc<str>]) -> Vec<RawEntry> {
    let streams: Vec<(Value, Value)> = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => {
                    let entries = pair.swap_remove(1);
                    Some((pair.swap_remove(0), entries))
                }
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs,
        _ => Vec::new(),
    };
    streams
        .into_iter()
        .flat_map(|(name, entries)| {
            let name = value_text(&name).unwrap_or_default();
            let key = keys
                .iter()
                .find(|k| k.as_ref() == name)
                .cloned()
                .unwrap_or_else(|| Arc::from(name));
            parse_entries(&key, entries)
        })
        .collect()
}

/// The entries of an XRANGE-style array `[[id, [field, value, ...]], ...]`; an entry whose
/// fields are nil (deleted while pending) is left out.
pub(crate) fn parse_entries(stream: &Arc<str>, list: Value) -> Vec<RawEntry> {
    let Value::Array(items) = list else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| {
            let Value::Array(mut pair) = item else {
                return None;
            };
            if pair.len() != 2 {
                return None;
            }
            let fields = pair.pop()?;
            let stream_id = value_text(&pair[0])?;
            let fields = match fields {
                Value::Array(flat) => {
                    let mut out = Vec::with_capacity(flat.len() / 2);
                    let mut it = flat.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        out.push((value_text(&k)?, v));
                    }
                    out
                }
                Value::Map(pairs) => pairs
                    .into_iter()
                    .filter_map(|(k, v)| Some((value_text(&k)?, v)))
                    .collect(),
                _ => return None,
            };
            Some(RawEntry {
                stream: stream.clone(),
                stream_id,
                fields,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{by_stream, EntryRef};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn read_replies_keep_field_order_and_skip_deleted_entries() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("outbox:t"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![bulk("id"), bulk("x"), bulk("key"), bulk("k1")]),
                ]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let keys: Vec<Arc<str>> = vec![Arc::from("outbox:t")];
        let entries = parse_read_reply(reply, &keys);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].stream_id, "1-0");
        assert!(Arc::ptr_eq(&entries[0].stream, &keys[0]));
        let names: Vec<&str> = entries[0].fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["id", "key"]);
        assert_eq!(entries[0].key_field().as_deref(), Some("k1"));
        assert!(parse_read_reply(Value::Nil, &keys).is_empty());
    }

    #[test]
    fn a_read_over_several_streams_tags_each_entry_with_its_stream() {
        let entry =
            |id: &str| Value::Array(vec![bulk(id), Value::Array(vec![bulk("id"), bulk(id)])]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("p:a"),
                Value::Array(vec![entry("5-0"), entry("6-0")]),
            ]),
            Value::Array(vec![bulk("p:b"), Value::Array(vec![entry("5-0")])]),
        ]);
        let keys: Vec<Arc<str>> = vec![Arc::from("p:a"), Arc::from("p:b")];
        let got: Vec<(String, String)> = parse_read_reply(reply, &keys)
            .into_iter()
            .map(|e| (e.stream.to_string(), e.stream_id))
            .collect();
        assert_eq!(
            got,
            vec![
                ("p:a".to_string(), "5-0".to_string()),
                ("p:a".to_string(), "6-0".to_string()),
                ("p:b".to_string(), "5-0".to_string()),
            ]
        );
        let refs = [
            EntryRef {
                stream: keys[0].clone(),
                id: "1-0".into(),
            },
            EntryRef {
                stream: keys[1].clone(),
                id: "1-0".into(),
            },
            EntryRef {
                stream: keys[0].clone(),
                id: "2-0".into(),
            },
        ];
        let grouped: Vec<(String, Vec<String>)> = by_stream(&refs)
            .into_iter()
            .map(|(s, ids)| (s.to_string(), ids))
            .collect();
        assert_eq!(
            grouped,
            vec![
                (
                    "p:a".to_string(),
                    vec!["1-0".to_string(), "2-0".to_string()]
                ),
                ("p:b".to_string(), vec!["1-0".to_string()]),
            ]
        );
    }
}
