//! A consumer group on plain streams: every command a plain Redis stream command
//! (`XREADGROUP`, `XPENDING`, `XRANGE`, `XCLAIM`, `XAUTOCLAIM`, `XACK`), no script and no
//! lease. The fenced source ([`super::Fenced`]) uses these same commands for what needs no
//! fence.

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{RedisResult, Value};

use outbox_core::entry::value_text;
use outbox_core::RedisConn;

use super::{Check, NewEntries, Pending, Rebalanced, Source};
use crate::config::ConsumerConfig;
use crate::stream::{by_slot, by_stream, parse_entries, parse_read_reply, EntryRef, RawEntry};

/// A consumer group on plain streams: any consumer of the group may handle any entry.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Group;

impl Source for Group {
    const FENCED: bool = false;

    fn readable(&self, streams: &[Arc<str>]) -> Vec<Arc<str>> {
        streams.to_vec()
    }

    fn check(&self, _stream: &str) -> Check {
        Check::Anyone
    }

    fn fenced_out(&self, _stream: &str) {}

    fn releasing(&self) -> bool {
        false
    }

    async fn rebalance(&self, _: &mut RedisConn, _: &ConsumerConfig) -> RedisResult<Rebalanced> {
        Ok(Rebalanced::default())
    }

    async fn read_new(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        streams: &[Arc<str>],
        acks: &[EntryRef],
    ) -> RedisResult<NewEntries> {
        if streams.is_empty() {
            ack(conn, config, acks).await?;
            tokio::time::sleep(config.block.min(POLL)).await;
            return Ok(NewEntries::default());
        }
        let read = read_unless_held(conn, config, streams, acks).await?;
        if !read.entries.is_empty() || !read.held.is_empty() {
            return Ok(read);
        }
        wait_and_read(conn, config, streams).await
    }
}

/// In one round trip per hash slot: the acknowledgements, whether this consumer still has
/// pending entries on each stream (`XPENDING ... 1 consumer`), and `XREADGROUP ... >` on all
/// of them. Only this consumer adds to its own pending list, so what the check finds still
/// holds when the read runs; entries read from a stream found held are returned as `early`.
pub(crate) async fn read_unless_held(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    streams: &[Arc<str>],
    acks: &[EntryRef],
) -> RedisResult<NewEntries> {
    let cluster = conn.is_cluster();
    if cluster {
        // No pipeline may span slots: acknowledge first, then read each slot's streams.
        ack(conn, config, acks).await?;
    }
    let groups = by_slot(streams.to_vec(), |s| s, cluster);
    let reads = groups.into_iter().enumerate().map(|(i, group)| {
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        if !cluster && i == 0 {
            add_acks(&mut pipe, config, acks);
        }
        for stream in &group {
            pipe.cmd("XPENDING")
                .arg(stream.as_ref())
                .arg(&config.group)
                .arg("-")
                .arg("+")
                .arg(1)
                .arg(&config.consumer);
        }
        pipe.add_command(xreadgroup(config, &group, None));
        async move {
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            Ok::<_, redis::RedisError>((group, replies))
        }
    });
    let mut read = NewEntries::default();
    for (group, mut replies) in futures::future::try_join_all(reads).await? {
        let body = replies.pop().unwrap_or(Value::Nil);
        let held: Vec<Arc<str>> = group
            .iter()
            .zip(&replies)
            .filter(|(_, pending)| matches!(pending, Value::Array(p) if !p.is_empty()))
            .map(|(stream, _)| stream.clone())
            .collect();
        for entry in parse_read_reply(body, &group) {
            if held.contains(&entry.stream) {
                read.early.push(entry.at());
            } else {
                read.entries.push(entry);
            }
        }
        read.held.extend(held);
    }
    Ok(read)
}

/// Waits up to `block` for new entries and reads them (`XREADGROUP ... BLOCK`). On a cluster
/// whose streams span several slots one blocking read could not cover them all: it polls.
async fn wait_and_read(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    streams: &[Arc<str>],
) -> RedisResult<NewEntries> {
    if conn.is_cluster() && !one_slot(streams.iter()) {
        tokio::time::sleep(config.block.min(POLL)).await;
        return Ok(NewEntries::default());
    }
    let reply: Value = xreadgroup(config, streams, Some(config.block))
        .query_async(conn)
        .await?;
    Ok(NewEntries {
        entries: parse_read_reply(reply, streams),
        ..NewEntries::default()
    })
}

/// `XREADGROUP GROUP g consumer COUNT n [BLOCK ms] STREAMS s... > ...`.
fn xreadgroup(
    config: &ConsumerConfig,
    streams: &[Arc<str>],
    block: Option<Duration>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&config.group)
        .arg(&config.consumer)
        .arg("COUNT")
        .arg(config.batch_size);
    if let Some(block) = block {
        cmd.arg("BLOCK").arg(block.as_millis().max(1) as u64);
    }
    cmd.arg("STREAMS");
    for s in streams {
        cmd.arg(s.as_ref());
    }
    for _ in streams {
        cmd.arg(">");
    }
    cmd
}

/// Whether all these keys share one hash slot.
pub(super) fn one_slot<'a>(mut keys: impl Iterator<Item = &'a Arc<str>>) -> bool {
    let Some(first) = keys.next().map(|s| Slot::for_key(s.as_bytes())) else {
        return true;
    };
    keys.all(|s| Slot::for_key(s.as_bytes()) == first)
}

/// How often a consumer whose streams span several cluster slots looks for new entries.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// This consumer's pending entries, oldest first, with how many times each was delivered:
/// `XPENDING key group - + count consumer`.
pub(super) async fn pending_mine(
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
pub(super) async fn fetch(
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
pub(super) async fn take(
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
pub(super) async fn keep_in_hand(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    per_stream: Vec<(Arc<str>, Vec<String>)>,
    min_idle: Duration,
) -> RedisResult<()> {
    for group in by_slot(per_stream, |(key, _)| key, conn.is_cluster()) {
        let mut pipe = redis::pipe();
        for (key, ids) in group {
            pipe.cmd("XCLAIM")
                .arg(key.as_ref())
                .arg(&config.group)
                .arg(&config.consumer)
                .arg(min_idle.as_millis() as u64)
                .arg(ids)
                .arg("JUSTID")
                .ignore();
        }
        run(conn, &pipe).await?;
    }
    Ok(())
}

/// Claims, to this consumer, entries of the group idle longer than `claim_idle` (their
/// consumer is taken for dead): `XAUTOCLAIM ... JUSTID` over the whole pending list, in
/// batches, without counting a delivery (the next delivery counts it). Returns how many.
pub(super) async fn claim_abandoned(
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

/// `XACK key group id...` per stream, pipelined: one round trip (one per hash slot, at once,
/// on a cluster).
pub(crate) async fn ack(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    refs: &[EntryRef],
) -> RedisResult<()> {
    let groups = by_slot(by_stream(refs), |(key, _)| key, conn.is_cluster());
    let sends = groups.into_iter().map(|group| {
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        add_stream_acks(&mut pipe, config, group);
        async move { run(&mut conn, &pipe).await }
    });
    futures::future::try_join_all(sends).await.map(|_| ())
}

/// `XACK key group id...` per stream of `refs`, replies ignored.
pub(super) fn add_acks(pipe: &mut redis::Pipeline, config: &ConsumerConfig, refs: &[EntryRef]) {
    add_stream_acks(pipe, config, by_stream(refs));
}

fn add_stream_acks(
    pipe: &mut redis::Pipeline,
    config: &ConsumerConfig,
    per_stream: Vec<(Arc<str>, Vec<String>)>,
) {
    for (key, ids) in per_stream {
        pipe.cmd("XACK")
            .arg(key.as_ref())
            .arg(&config.group)
            .arg(ids)
            .ignore();
    }
}

/// Sends a pipeline whose replies are all ignored; an empty one is not sent.
pub(super) async fn run(conn: &mut RedisConn, pipe: &redis::Pipeline) -> RedisResult<()> {
    if pipe.is_empty() {
        return Ok(());
    }
    pipe.query_async::<()>(conn).await
}
