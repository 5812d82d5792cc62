//! Parked keys on the consumer's side ([`crate::ConsumerConfig::park_keys`], contract section
//! 13; the state in Redis is [`outbox_core::parked`]'s). Three moves:
//! - a batch's keys are looked up first ([`mark_parked`]): an entry of a parked key is held
//!   (appended to its key's list, then acknowledged like a handled one), never handled now;
//! - a dead-lettered entry parks its key ([`park_dead`]) before it leaves the pending list,
//!   so no later entry of the key can slip past it;
//! - a key an operator released is drained ([`drain`]): its held entries handled in their
//!   order by one consumer at a time (a lock in Redis) that may handle its stream, then the
//!   key is forgotten and flows again. An entry that dies while draining parks the key again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use redis::{RedisResult, Value};

use outbox_core::backoff;
use outbox_core::parked::{self, Held, Parked};
use outbox_core::RedisConn;

use crate::config::ConsumerConfig;
use crate::handling::{Ctx, Delivery, Fate, Process};
use crate::source::{Check, Source};
use crate::stream::RawEntry;

/// A released key being drained: its parked hash, its held list, the key.
struct Draining {
    parked: String,
    list: String,
    key: String,
}

/// Marks the deliveries whose key is parked in this group (one HMGET per topic).
pub(crate) async fn mark_parked(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    deliveries: &mut [&mut Delivery],
) -> RedisResult<()> {
    let mut by_topic: HashMap<String, HashSet<String>> = HashMap::new();
    for d in deliveries.iter() {
        if let Some((topic, key)) = d.topic_key() {
            by_topic
                .entry(topic.to_string())
                .or_default()
                .insert(key.to_string());
        }
    }
    let mut parked_now: HashSet<(String, String)> = HashSet::new();
    for (topic, keys) in by_topic {
        let keys: Vec<String> = keys.into_iter().collect();
        let hash = parked::parked_key(&config.stream_prefix, &topic, &config.group);
        let found: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&hash)
            .arg(&keys)
            .query_async(conn)
            .await?;
        for (key, state) in keys.into_iter().zip(found) {
            if state.is_some() {
                parked_now.insert((topic.clone(), key));
            }
        }
    }
    if parked_now.is_empty() {
        return Ok(());
    }
    for d in deliveries.iter_mut() {
        let parked = d
            .topic_key()
            .is_some_and(|(t, k)| parked_now.contains(&(t.to_string(), k.to_string())));
        d.parked = parked;
    }
    Ok(())
}

/// Appends `d`'s entry to its parked key's held list (its acknowledgement follows with the
/// handled entries'); false when the key was drained and forgotten meanwhile (handle it then).
/// A crash in between leaves it pending: it is held a second time, and a second handling of
/// one event is what consumers guard against anyway (the inbox).
pub(crate) async fn hold(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    d: &Delivery,
) -> RedisResult<bool> {
    let Some((topic, key)) = d.topic_key() else {
        return Ok(false);
    };
    let held = Held {
        stream: d.raw.stream.to_string(),
        id: d.raw.stream_id.clone(),
        fields: d
            .raw
            .fields
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), outbox_core::entry::value_text(v)?)))
            .collect(),
    };
    let hash = parked::parked_key(&config.stream_prefix, topic, &config.group);
    let list = parked::held_key(&config.stream_prefix, topic, &config.group, key);
    parked::hold(conn, &hash, &list, key, &held).await
}

/// Parks `d`'s key, dead entry `dead_entry` in the dead stream (empty while it is not written
/// yet). Nothing for an unkeyed or malformed entry.
pub(crate) async fn park_dead(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    d: &Delivery,
    dead_entry: &str,
) -> RedisResult<()> {
    let (Some((topic, key)), Ok(entry)) = (d.topic_key(), &d.parsed) else {
        return Ok(());
    };
    let state = Parked {
        dead_id: entry.id.to_string(),
        dead_entry: dead_entry.to_string(),
        stream: d.raw.stream.to_string(),
        since_ms: chrono::Utc::now().timestamp_millis(),
        released: false,
    };
    let hash = parked::parked_key(&config.stream_prefix, topic, &config.group);
    if parked::park(conn, &hash, key, &state).await? && !dead_entry.is_empty() {
        tracing::warn!(topic, key, event_id = %entry.id, "key parked behind its dead entry: its later entries are held until an operator discards or redrives it");
    }
    Ok(())
}

/// Deletes a drain lock if it is this consumer's.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/unlock.lua`.
const UNLOCK: &str = include_str!("../protocol/scripts/unlock.lua");

/// Drains every released key of the consumer's topics that this consumer may handle now.
pub(crate) async fn drain<S: Source, P: Process>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    group: &Arc<str>,
    process: &P,
) -> RedisResult<()> {
    let config = ctx.config;
    for topic in &config.topics {
        let hash = parked::parked_key(&config.stream_prefix, topic, &config.group);
        for (key, state) in parked::parked_keys(conn, &hash).await? {
            if !state.released || ctx.source.check(&state.stream) == Check::NotMine {
                continue;
            }
            let list = parked::held_key(&config.stream_prefix, topic, &config.group, &key);
            let lock = parked::drain_lock_key(&list);
            let ttl = u64::try_from(config.claim_idle.as_millis()).unwrap_or(u64::MAX);
            let got: Option<String> = redis::cmd("SET")
                .arg(&lock)
                .arg(&config.consumer)
                .arg("NX")
                .arg("PX")
                .arg(ttl.max(1))
                .query_async(conn)
                .await?;
            if got.is_none() {
                continue;
            }
            let from = Draining {
                parked: hash.clone(),
                list,
                key,
            };
            let drained = drain_key(ctx, conn, topic, group, process, from).await;
            redis::Script::new(UNLOCK)
                .key(&lock)
                .arg(&config.consumer)
                .invoke_async::<i64>(conn)
                .await?;
            drained?;
        }
    }
    Ok(())
}

/// Handles a released key's held entries in order until none is left (the key then flows),
/// one dies (parked again), or one cannot be handled now (an outage: the next turn goes on).
async fn drain_key<S: Source, P: Process>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    topic: &str,
    group: &Arc<str>,
    process: &P,
    from: Draining,
) -> RedisResult<()> {
    let config = ctx.config;
    loop {
        let first: Option<String> = redis::cmd("LINDEX")
            .arg(&from.list)
            .arg(0)
            .query_async(conn)
            .await?;
        let Some(text) = first else {
            if parked::unpark(conn, &from.parked, &from.list, &from.key).await? {
                tracing::info!(topic, key = from.key, "parked key drained: it flows again");
            }
            return Ok(());
        };
        let Ok(held) = serde_json::from_str::<Held>(&text) else {
            tracing::warn!(
                topic,
                key = from.key,
                "a held entry that is not one: dropped"
            );
            parked::pop(conn, &from.list, &text).await?;
            continue;
        };
        let raw = RawEntry {
            stream: Arc::from(held.stream.as_str()),
            stream_id: held.id.clone(),
            fields: held
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), Value::BulkString(v.clone().into_bytes())))
                .collect(),
        };
        let mut delivery = 1;
        loop {
            let mut d = Delivery::new(raw.clone(), Some(topic), group, delivery, false);
            d.from_held = true;
            let fate = process
                .process(ctx, vec![vec![d]])
                .await
                .into_iter()
                .next()
                .map(|o| o.fate);
            match fate {
                Some(Fate::Done) => {
                    parked::pop(conn, &from.list, &text).await?;
                    break;
                }
                // Dead again: out of the list, the key parked again behind it.
                Some(Fate::DeadLettered) => {
                    parked::pop(conn, &from.list, &text).await?;
                    return Ok(());
                }
                Some(Fate::Failed { delivery: n }) => {
                    let wait = backoff::retry_delay(
                        u32::try_from(n).unwrap_or(u32::MAX),
                        config.retry_base,
                        config.retry_max,
                        backoff::unit(),
                    );
                    tokio::time::sleep(wait).await;
                    delivery = n + 1;
                }
                Some(Fate::Lost(Some(e))) => return Err(e),
                _ => return Ok(()),
            }
        }
    }
}
