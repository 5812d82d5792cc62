//! A group whose partitioned topics are divided by the fleet ([`crate::fleet`]): a partition
//! is read, taken and kept only under this consumer's lease, checked in the same script as
//! the command ([`crate::fleet::scripts`]), so a consumer that lost a partition (frozen past
//! its lease, then resumed) cannot move its entries; between batches, partitions are given up
//! and taken over with their previous owner's pending entries. The consumer's plain topics
//! are read in the same script, unfenced, and otherwise handled as [`super::Group`] does.

use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Value};

use outbox_core::entry::value_text;
use outbox_core::RedisConn;

use super::group::{self, one_slot, POLL};
use super::{Check, NewEntries, Rebalanced, Source};
use crate::config::ConsumerConfig;
use crate::fleet::scripts::{self, LeaseOp, ReadTarget};
use crate::fleet::Fleet;
use crate::stream::{by_slot, by_stream, parse_read_reply, EntryRef};

/// The fleet's view of the group, for the loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fenced<'a>(pub(crate) &'a Fleet);

impl Source for Fenced<'_> {
    const FENCED: bool = true;

    fn readable(&self, streams: &[Arc<str>]) -> Vec<Arc<str>> {
        self.0.readable(streams)
    }

    fn check(&self, stream: &str) -> Check {
        if self.0.owner_key(stream).is_none() {
            return Check::Anyone;
        }
        match self.0.lease_in_hand(stream) {
            Some(lease) => Check::Held(lease),
            None => Check::NotMine,
        }
    }

    fn fenced_out(&self, stream: &str) {
        self.0.forget(stream);
    }

    fn releasing(&self) -> bool {
        !self.0.to_release().is_empty()
    }

    async fn rebalance(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
    ) -> RedisResult<Rebalanced> {
        let mut changes = Rebalanced::default();
        for (stream, owner, epoch) in self.0.to_release() {
            scripts::lease(conn, &owner, &epoch, &config.consumer, 0, LeaseOp::Release).await?;
            self.0.forget(&stream);
            tracing::info!(stream = %stream, "gave up partition for a rebalance");
            changes.released.push(stream);
        }
        for (stream, owner, lease) in self.0.to_hand_over() {
            let taken =
                scripts::hand_over(conn, &stream, &owner, &config.group, &config.consumer).await?;
            match taken {
                Some(taken) => {
                    self.0.handed_over(&stream);
                    tracing::info!(stream = %stream, partition = lease.partition, epoch = lease.epoch, taken, "partition handed over: its unacknowledged entries first, in order");
                    changes.taken.push(stream);
                }
                None => self.0.forget(&stream),
            }
        }
        Ok(changes)
    }

    async fn read_new(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        streams: &[Arc<str>],
        acks: &[EntryRef],
    ) -> RedisResult<NewEntries> {
        let (read, last) = self.read_fenced(conn, config, streams, acks).await?;
        if read.entries.is_empty() && read.held.is_empty() {
            wait_for_new(conn, config, &last).await?;
        }
        Ok(read)
    }

    async fn claim_abandoned(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        stream: &str,
    ) -> RedisResult<usize> {
        // A divided partition's entries are taken over by its new owner, not claimed.
        if self.0.owner_key(stream).is_some() {
            return Ok(0);
        }
        group::claim_abandoned(conn, config, stream).await
    }

    async fn take(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        stream: &str,
        id: &str,
        deliveries: u64,
    ) -> RedisResult<bool> {
        let Some(owner) = self.0.owner_key(stream) else {
            return group::take(conn, config, stream, id, deliveries).await;
        };
        let args = [
            "0".to_string(),
            id.to_string(),
            "RETRYCOUNT".to_string(),
            deliveries.to_string(),
            "JUSTID".to_string(),
        ];
        let ids: Option<Vec<String>> =
            scripts::claim_fenced(conn, stream, &owner, &config.group, &config.consumer, &args)
                .await?;
        Ok(ids.is_some_and(|ids| !ids.is_empty()))
    }

    async fn keep_in_hand(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        refs: &[EntryRef],
        min_idle: Duration,
    ) -> RedisResult<()> {
        let mut unfenced = Vec::new();
        for (stream, ids) in by_stream(refs) {
            // Only while this consumer holds the lease: one that lost it must not take
            // entries back from the new owner.
            let Some(owner) = self.0.owner_key(&stream) else {
                unfenced.push((stream, ids));
                continue;
            };
            let mut args = vec![(min_idle.as_millis() as u64).to_string()];
            args.extend(ids);
            args.push("JUSTID".to_string());
            scripts::claim_fenced::<Value>(
                conn,
                &stream,
                &owner,
                &config.group,
                &config.consumer,
                &args,
            )
            .await?;
        }
        group::keep_in_hand(conn, config, unfenced, min_idle).await
    }
}

impl Fenced<'_> {
    /// The read script on `streams` (one per hash slot on a cluster), `acks` first in the
    /// same round trip; with nothing new, each stream's last id, to wait on.
    async fn read_fenced(
        &self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        streams: &[Arc<str>],
        acks: &[EntryRef],
    ) -> RedisResult<(NewEntries, Vec<(Arc<str>, String)>)> {
        let cluster = conn.is_cluster();
        let groups = by_slot(streams.to_vec(), |s| s, cluster);
        let replies: Vec<Value> = if !cluster {
            let mut pipe = redis::pipe();
            group::add_acks(&mut pipe, config, acks);
            if let Some(group) = groups.first() {
                self.add_read(&mut pipe, config, group);
            }
            if groups.is_empty() {
                group::run(conn, &pipe).await?;
                Vec::new()
            } else {
                pipe.query_async(conn).await?
            }
        } else {
            group::ack(conn, config, acks).await?;
            let reads = groups.iter().map(|group| {
                let mut conn = conn.clone();
                let mut pipe = redis::pipe();
                self.add_read(&mut pipe, config, group);
                async move { pipe.query_async::<Vec<Value>>(&mut conn).await }
            });
            futures::future::try_join_all(reads)
                .await?
                .into_iter()
                .flatten()
                .collect()
        };
        let mut read = NewEntries::default();
        let mut last = Vec::new();
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
                Some("e") => read.entries.extend(parse_read_reply(body, streams)),
                Some("w") => last.extend(parse_last_ids(body, streams)),
                Some("p") => read.held.extend(parse_streams(body, streams)),
                _ => {}
            }
        }
        Ok((read, last))
    }

    /// Adds the lease-checked read of `group` (streams of one slot) to `pipe`.
    fn add_read(&self, pipe: &mut redis::Pipeline, config: &ConsumerConfig, group: &[Arc<str>]) {
        let owners: Vec<Option<String>> = group.iter().map(|s| self.0.owner_key(s)).collect();
        let targets: Vec<ReadTarget<'_>> = group
            .iter()
            .zip(&owners)
            .map(|(stream, owner)| ReadTarget {
                stream,
                owner: owner.as_deref(),
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
}

/// Waits until a stream of `last` (stream, last id) gets an entry past that id, or `block`
/// passes: `XREAD BLOCK`, which does not touch the group (the read itself must go through
/// the lease check). On a cluster whose streams span several slots it polls instead.
async fn wait_for_new(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    last: &[(Arc<str>, String)],
) -> RedisResult<()> {
    if last.is_empty() || (conn.is_cluster() && !one_slot(last.iter().map(|(s, _)| s))) {
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
