//! Every Redis command the consumer sends, one function each, named for what it does to the
//! group: create it, read new entries, list and fetch this consumer's pending ones, take one
//! for another delivery, acknowledge, dead-letter, claim from dead consumers.
//!
//! Replies are parsed by hand where the crate's types would lose the field order (a dead
//! letter keeps the original fields in their order) or choke on a deleted entry's nil.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};

use crate::config::ConsumerConfig;
use outbox_core::entry::{field, value_text};
use outbox_core::{groups, keys, RedisConn};

/// One entry as Redis returned it: its stream's key, its id and its fields in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawEntry {
    pub(crate) stream: Arc<str>,
    pub(crate) stream_id: String,
    pub(crate) fields: Vec<(String, Value)>,
}

impl RawEntry {
    /// Where the entry is: its stream and id (ids are unique within one stream only).
    pub(crate) fn at(&self) -> EntryRef {
        EntryRef {
            stream: self.stream.clone(),
            id: self.stream_id.clone(),
        }
    }

    /// The `key` field as text, if present: the lane of an entry that failed to parse.
    pub(crate) fn key_field(&self) -> Option<String> {
        self.fields
            .iter()
            .find(|(k, _)| k == field::KEY)
            .and_then(|(_, v)| value_text(v))
    }
}

/// An entry's place: its stream's key and its id there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryRef {
    pub(crate) stream: Arc<str>,
    pub(crate) id: String,
}

/// The ids of `refs`, per stream, streams in order of first appearance: one XACK or XCLAIM
/// per stream.
pub(crate) fn by_stream<'a>(
    refs: impl IntoIterator<Item = &'a EntryRef>,
) -> Vec<(Arc<str>, Vec<String>)> {
    let mut out: Vec<(Arc<str>, Vec<String>)> = Vec::new();
    for r in refs {
        match out.iter_mut().find(|(stream, _)| *stream == r.stream) {
            Some((_, ids)) => ids.push(r.id.clone()),
            None => out.push((r.stream.clone(), vec![r.id.clone()])),
        }
    }
    out
}

/// `XGROUP CREATE key group 0 MKSTREAM`; a group that exists already is left as it is.
pub(crate) async fn ensure_group(conn: &mut RedisConn, key: &str, group: &str) -> RedisResult<()> {
    groups::create(conn, key, group, "0").await.map(|_| ())
}

/// `XREADGROUP ... COUNT n BLOCK ms STREAMS key... > ...`: up to `count` entries of each
/// stream never delivered to the group, now in this consumer's pending list; `acks` are
/// acknowledged first, in the same round trip.
pub(crate) async fn read_new(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    keys: &[Arc<str>],
    acks: &[EntryRef],
) -> RedisResult<Vec<RawEntry>> {
    let mut pipe = redis::pipe();
    add_acks(&mut pipe, config, acks);
    pipe.cmd("XREADGROUP")
        .arg("GROUP")
        .arg(&config.group)
        .arg(&config.consumer)
        .arg("COUNT")
        .arg(config.batch_size)
        .arg("BLOCK")
        .arg(config.block.as_millis().max(1) as u64)
        .arg("STREAMS")
        .arg(keys.iter().map(|k| k.as_ref()).collect::<Vec<&str>>())
        .arg(vec![">"; keys.len()]);
    let (reply,): (Value,) = pipe.query_async(conn).await?;
    Ok(parse_read_reply(reply, keys))
}

/// A pending entry's id and how many times it was delivered.
pub(crate) type Pending = (String, u64);

/// This consumer's pending entries, oldest first, with how many times each was delivered:
/// `XPENDING key group - + count consumer`.
pub(crate) async fn pending_mine(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    key: &str,
) -> RedisResult<Vec<Pending>> {
    let reply: redis::streams::StreamPendingCountReply = redis::cmd("XPENDING")
        .arg(key)
        .arg(&config.group)
        .arg("-")
        .arg("+")
        .arg(config.batch_size)
        .arg(&config.consumer)
        .query_async(conn)
        .await?;
    Ok(reply
        .ids
        .into_iter()
        .map(|p| (p.id, p.times_delivered as u64))
        .collect())
}

/// The entries with these ids (pipelined `XRANGE key id id`), without touching the group's
/// state; `None` for an id no longer in the stream (trimmed or deleted).
pub(crate) async fn fetch(
    conn: &mut RedisConn,
    key: &Arc<str>,
    ids: &[String],
) -> RedisResult<Vec<Option<RawEntry>>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.cmd("XRANGE").arg(key.as_ref()).arg(id).arg(id);
    }
    let replies: Vec<Value> = pipe.query_async(conn).await?;
    Ok(replies
        .into_iter()
        .map(|r| parse_entries(key, r).into_iter().next())
        .collect())
}

/// Takes entry `id` for its delivery number `deliveries`, if it is still this consumer's:
/// `XCLAIM key group consumer 0 id RETRYCOUNT n JUSTID` sets the group's delivery counter
/// to `n` and restarts its idle time. False when the entry is gone from the pending list.
pub(crate) async fn take_for_delivery(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    key: &str,
    id: &str,
    deliveries: u64,
) -> RedisResult<bool> {
    let ids: Vec<String> = redis::cmd("XCLAIM")
        .arg(key)
        .arg(&config.group)
        .arg(&config.consumer)
        .arg(0)
        .arg(id)
        .arg("RETRYCOUNT")
        .arg(deliveries)
        .arg("JUSTID")
        .query_async(conn)
        .await?;
    Ok(!ids.is_empty())
}

/// Restarts the idle time of entries this consumer holds and is still working on:
/// `XCLAIM key group consumer <min_idle> id... JUSTID` per stream, pipelined (no delivery
/// counted). An entry idle less than `min_idle` is left alone: it was just delivered,
/// possibly to another consumer.
pub(crate) async fn keep_idle_low(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    refs: &[EntryRef],
    min_idle: Duration,
) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for (key, ids) in by_stream(refs) {
        pipe.cmd("XCLAIM")
            .arg(key.as_ref())
            .arg(&config.group)
            .arg(&config.consumer)
            .arg(min_idle.as_millis() as u64)
            .arg(ids)
            .arg("JUSTID")
            .ignore();
    }
    run(conn, &pipe).await
}

/// `XACK key group id...` per stream, pipelined: one round trip.
pub(crate) async fn ack(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    refs: &[EntryRef],
) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    add_acks(&mut pipe, config, refs);
    run(conn, &pipe).await
}

/// `XACK key group id...` per stream of `refs`, replies ignored.
fn add_acks(pipe: &mut redis::Pipeline, config: &ConsumerConfig, refs: &[EntryRef]) {
    for (key, ids) in by_stream(refs) {
        pipe.cmd("XACK")
            .arg(key.as_ref())
            .arg(&config.group)
            .arg(ids)
            .ignore();
    }
}

/// Sends a pipeline whose replies are all ignored; an empty one is not sent.
async fn run(conn: &mut RedisConn, pipe: &redis::Pipeline) -> RedisResult<()> {
    if pipe.is_empty() {
        return Ok(());
    }
    pipe.query_async::<()>(conn).await
}

/// Moves an entry to the dead stream if it is still this consumer's: `XADD <dead> *
/// <original fields> error group deliveries` and its `XACK`, in one script, so that two
/// consumers that both hold it (one claimed it from the other) write one dead letter, not
/// two. `Ok(false)`: the entry is no longer this consumer's; nothing was written.
///
/// On a cluster the dead stream usually lives in another slot than its stream, and no script
/// may touch both: the dead letter is written first, then the entry acknowledged if still
/// this consumer's (one script on its stream), and the dead letter deleted again if it was
/// not. A crash between the two leaves the entry pending, so it is dead-lettered again later:
/// twice in the dead stream, never lost.
pub(crate) async fn dead_letter(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    raw: &RawEntry,
    error: &str,
    deliveries: u64,
) -> RedisResult<bool> {
    let dead = keys::dead_key_of(&raw.stream);
    let mut fields: Vec<(&str, Vec<u8>)> = raw
        .fields
        .iter()
        .filter(|(field, _)| !matches!(field.as_str(), "error" | "group" | "deliveries"))
        .map(|(field, value)| (field.as_str(), value_bytes(value)))
        .collect();
    fields.push(("error", error.as_bytes().to_vec()));
    fields.push(("group", config.group.as_bytes().to_vec()));
    fields.push(("deliveries", deliveries.to_string().into_bytes()));
    let one_slot = Slot::for_key(raw.stream.as_bytes()) == Slot::for_key(dead.as_bytes());
    if !conn.is_cluster() || one_slot {
        let script = redis::Script::new(DEAD_LETTER);
        let mut call = script.key(raw.stream.as_ref());
        call.key(&dead)
            .arg(&config.group)
            .arg(&config.consumer)
            .arg(&raw.stream_id);
        for (field, value) in &fields {
            call.arg(*field).arg(value.as_slice());
        }
        let written: i64 = call.invoke_async(conn).await?;
        return Ok(written == 1);
    }
    let mut add = redis::cmd("XADD");
    add.arg(&dead).arg("*");
    for (field, value) in &fields {
        add.arg(*field).arg(value.as_slice());
    }
    let dead_id: String = add.query_async(conn).await?;
    let acked: i64 = redis::Script::new(ACK_IF_MINE)
        .key(raw.stream.as_ref())
        .arg(&config.group)
        .arg(&config.consumer)
        .arg(&raw.stream_id)
        .invoke_async(conn)
        .await?;
    if acked == 1 {
        return Ok(true);
    }
    redis::cmd("XDEL")
        .arg(&dead)
        .arg(&dead_id)
        .query_async::<()>(conn)
        .await?;
    Ok(false)
}

/// KEYS: stream, dead stream. ARGV: group, consumer, stream id, then the dead entry's fields.
const DEAD_LETTER: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return 1
";

/// KEYS: stream. ARGV: group, consumer, stream id. Acknowledges the entry if this consumer
/// holds it.
const ACK_IF_MINE: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return 1
";

/// A field value as Redis sent it, for copying into the dead stream.
fn value_bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::VerbatimString { text, .. } => text.clone().into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        other => format!("{other:?}").into_bytes(),
    }
}

/// Claims, to this consumer, entries of the group idle longer than `claim_idle` (their
/// consumer is taken for dead): `XAUTOCLAIM ... JUSTID` over the whole pending list, in
/// batches, without counting a delivery (the next delivery counts it). Returns how many.
pub(crate) async fn claim_abandoned(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    key: &str,
) -> RedisResult<usize> {
    let mut cursor = "0-0".to_string();
    let mut claimed = 0;
    // A bounded number of rounds: this consumer handles what it took before taking more.
    for _ in 0..10 {
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(key)
            .arg(&config.group)
            .arg(&config.consumer)
            .arg(config.claim_idle.as_millis() as u64)
            .arg(&cursor)
            .arg("COUNT")
            .arg(config.batch_size)
            .arg("JUSTID")
            .query_async(conn)
            .await?;
        let Value::Array(mut parts) = reply else {
            break;
        };
        if parts.len() < 2 {
            break;
        }
        let ids = parts.swap_remove(1);
        if let Value::Array(ids) = ids {
            claimed += ids.len();
        }
        cursor = match value_text(&parts[0]) {
            Some(next) => next,
            None => break,
        };
        if cursor == "0-0" || claimed >= config.batch_size {
            break;
        }
    }
    Ok(claimed)
}

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
