//! Reading: creating the group, new entries (`XREADGROUP ... >`), this consumer's pending
//! entries and the entries themselves (`XRANGE`).

use std::sync::Arc;

use redis::{RedisResult, Value};

use super::settle::add_acks;
use super::{parse_entries, parse_read_reply, EntryRef, RawEntry};
use crate::config::ConsumerConfig;
use outbox_core::{groups, keys, RedisConn};

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

/// The streams of the configured topics, in order: `<prefix><topic>`, or for a topic with
/// N > 1 partitions in the `<prefix>partitions` hash its N streams.
pub(crate) async fn resolve_partitions(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
) -> RedisResult<Vec<Arc<str>>> {
    let prefix = &config.stream_prefix;
    let mut streams = Vec::new();
    for topic in &config.topics {
        let counts: Option<u32> = redis::cmd("HGET")
            .arg(keys::partitions_hash(prefix))
            .arg(topic)
            .query_async(conn)
            .await?;
        match counts.unwrap_or(1) {
            0 | 1 => streams.push(Arc::from(keys::stream_key(prefix, topic))),
            n => streams.extend(
                keys::partition_keys(prefix, topic, n)
                    .into_iter()
                    .map(Arc::from),
            ),
        }
    }
    Ok(streams)
}
