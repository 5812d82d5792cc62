//! Holding entries: taking a pending entry for its next delivery, keeping the entries in hand
//! from other consumers' claims while slow handlers run, and claiming what dead consumers left.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::settle::run;
use super::{by_slot, by_stream, EntryRef};
use crate::config::ConsumerConfig;
use crate::fleet::scripts;
use outbox_core::entry::value_text;
use outbox_core::RedisConn;

/// Takes entry `id` for its delivery number `deliveries`, if it is still this consumer's:
/// `XCLAIM key group consumer 0 id RETRYCOUNT n JUSTID` sets the group's delivery counter
/// to `n` and restarts its idle time. False when the entry is gone from the pending list, or
/// when `owner` (the lease of a divided partition) is no longer this consumer's.
pub(crate) async fn take_for_delivery(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    owner: Option<&str>,
    key: &str,
    id: &str,
    deliveries: u64,
) -> RedisResult<bool> {
    if let Some(owner) = owner {
        let args = [
            "0".to_string(),
            id.to_string(),
            "RETRYCOUNT".to_string(),
            deliveries.to_string(),
            "JUSTID".to_string(),
        ];
        let ids: Option<Vec<String>> =
            scripts::claim_fenced(conn, key, owner, &config.group, &config.consumer, &args).await?;
        return Ok(ids.is_some_and(|ids| !ids.is_empty()));
    }
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
/// possibly to another consumer. On a divided partition (`owner_of` gives its lease's key)
/// only while this consumer holds the lease: one that lost it must not take entries back
/// from the new owner.
pub(crate) async fn keep_idle_low(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
    refs: &[EntryRef],
    min_idle: Duration,
    owner_of: impl Fn(&str) -> Option<String>,
) -> RedisResult<()> {
    let mut unfenced = Vec::new();
    for (key, ids) in by_stream(refs) {
        if let Some(owner) = owner_of(&key) {
            let mut args = vec![(min_idle.as_millis() as u64).to_string()];
            args.extend(ids);
            args.push("JUSTID".to_string());
            scripts::claim_fenced::<redis::Value>(
                conn,
                &key,
                &owner,
                &config.group,
                &config.consumer,
                &args,
            )
            .await?;
            continue;
        }
        unfenced.push((key, ids));
    }
    for group in by_slot(unfenced, |(key, _)| key, conn.is_cluster()) {
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
