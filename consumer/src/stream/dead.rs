//! Moving an entry to the dead stream, once, even when two consumers hold it.

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};

use super::RawEntry;
use crate::config::ConsumerConfig;
use outbox_core::RedisConn;

/// Moves an entry to the dead stream if it is still this consumer's: `XADD <dead> *
/// <original fields> error group deliveries` and its `XACK`, in one script, so that two
/// consumers that both hold it (one claimed it from the other) write one dead letter, not
/// two. `Ok(Some(id))`: written, at `id` in the dead stream; `Ok(None)`: the entry is no
/// longer this consumer's; nothing was written.
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
) -> RedisResult<Option<String>> {
    let dead = config.dead_key_of_stream(&raw.stream);
    let fields = dead_fields(config, raw, error, deliveries);
    let one_slot = Slot::for_key(raw.stream.as_bytes()) == Slot::for_key(dead.as_bytes());
    if !conn.is_cluster() || one_slot {
        let script = redis::Script::new(DEAD_LETTER);
        let mut call = script.key(raw.stream.as_ref());
        call.key(&dead)
            .arg(&config.group)
            .arg(&config.consumer)
            .arg(&raw.stream_id);
        for (field, value) in &fields {
            call.arg(field.as_str()).arg(value.as_slice());
        }
        let written: Value = call.invoke_async(conn).await?;
        return Ok(match written {
            Value::Int(_) => None,
            id => Some(redis::from_redis_value(id)?),
        });
    }
    let mut add = redis::cmd("XADD");
    add.arg(&dead).arg("*");
    for (field, value) in &fields {
        add.arg(field.as_str()).arg(value.as_slice());
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
        return Ok(Some(dead_id));
    }
    redis::cmd("XDEL")
        .arg(&dead)
        .arg(&dead_id)
        .query_async::<()>(conn)
        .await?;
    Ok(None)
}

/// The fields of `raw`'s dead entry: its own, then `error`, `group` and `deliveries`.
fn dead_fields(
    config: &ConsumerConfig,
    raw: &RawEntry,
    error: &str,
    deliveries: u64,
) -> Vec<(String, Vec<u8>)> {
    let mut fields: Vec<(String, Vec<u8>)> = raw
        .fields
        .iter()
        .filter(|(field, _)| !outbox_core::parked::DEAD_FIELDS.contains(&field.as_str()))
        .map(|(field, value)| (field.clone(), value_bytes(value)))
        .collect();
    fields.push(("error".into(), error.as_bytes().to_vec()));
    fields.push(("group".into(), config.group.as_bytes().to_vec()));
    fields.push(("deliveries".into(), deliveries.to_string().into_bytes()));
    fields
}

/// Writes the dead entry of `raw`, an entry no pending list holds (one held behind a parked
/// key): a plain `XADD`; returns its id in the dead stream.
pub(crate) async fn dead_letter_held(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    raw: &RawEntry,
    error: &str,
    deliveries: u64,
) -> RedisResult<String> {
    let mut add = redis::cmd("XADD");
    add.arg(config.dead_key_of_stream(&raw.stream)).arg("*");
    for (field, value) in dead_fields(config, raw, error, deliveries) {
        add.arg(field).arg(value);
    }
    add.query_async(conn).await
}

/// XADD to the dead stream and XACK, if the entry is still this consumer's.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/dead_letter.lua`.
const DEAD_LETTER: &str = include_str!("../../protocol/scripts/dead_letter.lua");

/// XACK if the entry is still this consumer's (a dead letter across cluster slots).
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/ack_if_mine.lua`.
const ACK_IF_MINE: &str = include_str!("../../protocol/scripts/ack_if_mine.lua");

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
