//! Reading: creating the group, new entries (`XREADGROUP ... >`, fenced by partition leases),
//! waiting for them, this consumer's pending entries and the entries themselves (`XRANGE`).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};

use super::settle::add_acks;
use super::{by_slot, parse_entries, parse_read_reply, EntryRef, RawEntry};
use crate::config::ConsumerConfig;
use crate::fleet::scripts::{self, ReadTarget};
use outbox_core::entry::value_text;
use outbox_core::{groups, keys, RedisConn};

/// `XGROUP CREATE key group 0 MKSTREAM`; a group that exists already is left as it is.
pub(crate) async fn ensure_group(conn: &mut RedisConn, key: &str, group: &str) -> RedisResult<()> {
    groups::create(conn, key, group, "0").await.map(|_| ())
}

/// A stream to read new entries from: its key, and the owner key of its lease when it is a
/// partition divided among the group (read only while this consumer holds the lease).
#[derive(Debug, Clone)]
pub(crate) struct ReadFrom {
    pub(crate) stream: Arc<str>,
    pub(crate) owner: Option<String>,
}

/// What a read of new entries found.
#[derive(Debug, Default)]
pub(crate) struct NewEntries {
    /// Entries, now in this consumer's pending list.
    pub(crate) entries: Vec<RawEntry>,
    /// When nothing was new: each stream's last id, to wait on ([`wait_for_new`]).
    pub(crate) last: Vec<(Arc<str>, String)>,
    /// Streams not read because this consumer still has pending entries there (those come
    /// first).
    pub(crate) held: Vec<Arc<str>>,
}

/// Up to `count` entries of each stream never delivered to the group (`XREADGROUP ... >`,
/// inside a script that skips partitions whose lease this consumer no longer holds, and reads
/// nothing while this consumer has entries of a stream pending), now in this consumer's
/// pending list; `acks` are acknowledged first, in the same round trip. One
/// script per hash slot on a cluster.
pub(crate) async fn read_new(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    from: &[ReadFrom],
    acks: &[EntryRef],
) -> RedisResult<NewEntries> {
    let cluster = conn.is_cluster();
    let groups = by_slot(from.iter().collect(), |r| &r.stream, cluster);
    let replies: Vec<Value> = if !cluster {
        // One round trip: the acknowledgements, then the read.
        let mut pipe = redis::pipe();
        add_acks(&mut pipe, config, acks);
        if let Some(group) = groups.first() {
            add_read(&mut pipe, config, group);
        }
        if groups.is_empty() {
            super::settle::run(conn, &pipe).await?;
            Vec::new()
        } else {
            pipe.query_async(conn).await?
        }
    } else {
        // No pipeline may span slots: acknowledge, then read each slot's streams at once.
        super::ack(conn, config, acks).await?;
        let reads = groups.iter().map(|group| {
            let mut conn = conn.clone();
            let mut pipe = redis::pipe();
            add_read(&mut pipe, config, group);
            async move { pipe.query_async::<Vec<Value>>(&mut conn).await }
        });
        futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect()
    };
    let keys: Vec<Arc<str>> = from.iter().map(|r| r.stream.clone()).collect();
    let mut read = NewEntries::default();
    for reply in replies {
        let Value::Array(mut parts) = reply else {
            continue;
        };
        if parts.is_empty() {
            continue;
        }
        let body = if parts.len() > 1 {
            parts.swap_remove(1)
        } else {
            Value::Nil
        };
        match value_text(&parts[0]).as_deref() {
            Some("e") => read.entries.extend(parse_read_reply(body, &keys)),
            Some("w") => read.last.extend(parse_last_ids(body, &keys)),
            Some("p") => read.held.extend(parse_streams(body, &keys)),
            _ => {}
        }
    }
    Ok(read)
}

/// Adds the lease-checked read of `group` (streams of one slot) to `pipe`.
fn add_read(pipe: &mut redis::Pipeline, config: &ConsumerConfig, group: &[&ReadFrom]) {
    let targets: Vec<ReadTarget<'_>> = group
        .iter()
        .map(|r| ReadTarget {
            stream: &r.stream,
            owner: r.owner.as_deref(),
        })
        .collect();
    scripts::add_read(
        pipe,
        &config.group,
        &config.consumer,
        config.batch_size,
        &targets,
    );
}

/// `{stream, stream, ...}` as the keys read.
fn parse_streams(body: Value, keys: &[Arc<str>]) -> Vec<Arc<str>> {
    let Value::Array(names) = body else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|name| Some(known_key(keys, value_text(name)?)))
        .collect()
}

/// The read key spelled `name` (shared), or a new one.
fn known_key(keys: &[Arc<str>], name: String) -> Arc<str> {
    keys.iter()
        .find(|k| k.as_ref() == name)
        .cloned()
        .unwrap_or_else(|| Arc::from(name))
}

/// `{stream, id, stream, id, ...}` as pairs.
fn parse_last_ids(body: Value, keys: &[Arc<str>]) -> Vec<(Arc<str>, String)> {
    let Value::Array(flat) = body else {
        return Vec::new();
    };
    flat.chunks(2)
        .filter_map(|pair| {
            let name = value_text(pair.first()?)?;
            let id = value_text(pair.get(1)?)?;
            Some((known_key(keys, name), id))
        })
        .collect()
}

/// Waits until a stream of `last` (stream, last id) gets an entry past that id, or `block`
/// passes: `XREAD BLOCK`, which does not touch the group. On a cluster whose streams span
/// several slots a blocking read could not cover them all: it polls instead.
pub(crate) async fn wait_for_new(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    last: &[(Arc<str>, String)],
) -> RedisResult<()> {
    let first = last.first().map(|(s, _)| Slot::for_key(s.as_bytes()));
    let one_slot = last
        .iter()
        .all(|(s, _)| Some(Slot::for_key(s.as_bytes())) == first);
    if last.is_empty() || (conn.is_cluster() && !one_slot) {
        tokio::time::sleep(config.block.min(POLL)).await;
        return Ok(());
    }
    let _: Value = redis::cmd("XREAD")
        .arg("COUNT")
        .arg(1)
        .arg("BLOCK")
        .arg(config.block.as_millis().max(1) as u64)
        .arg("STREAMS")
        .arg(last.iter().map(|(s, _)| s.as_ref()).collect::<Vec<&str>>())
        .arg(
            last.iter()
                .map(|(_, id)| id.as_str())
                .collect::<Vec<&str>>(),
        )
        .query_async(conn)
        .await?;
    Ok(())
}

/// How often a consumer whose streams span several cluster slots looks for new entries.
const POLL: Duration = Duration::from_millis(50);

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

/// The streams of each configured topic, in order: `<prefix><topic>`, or for a topic with
/// N > 1 partitions in the `<prefix>partitions` hash its N streams.
pub(crate) async fn resolve_partitions(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
) -> RedisResult<Vec<(String, Vec<Arc<str>>)>> {
    let prefix = &config.stream_prefix;
    let mut topics = Vec::new();
    for topic in &config.topics {
        let mut streams = Vec::new();
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
        topics.push((topic.clone(), streams));
    }
    Ok(topics)
}
