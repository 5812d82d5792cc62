//! A consumer group's parked keys (contract section 13), kept in Redis where every consumer
//! of the group and the relay's admin see them: once an entry is dead-lettered by a group
//! that parks keys, its partition key is parked in that group, and the key's later entries
//! are held (moved out of the stream's pending list into a list of their own) until an
//! operator discards the dead entry or redrives it; then the group's consumers handle the held
//! entries in their order, and the key flows again once none is left.
//!
//! Per topic and group: the hash [`parked_key`] (field: the partition key, value: its
//! [`Parked`] state as JSON) and per parked key the list [`held_key`] of [`Held`] entries
//! (JSON), oldest first. Both carry the group as their hash tag, so one script sees the state
//! and the list together on a Redis Cluster. The consumer library writes them; the relay's
//! admin reads them and releases keys with [`release`].
//!
//! The scripts' text lives in `core/protocol/scripts/`, which the clients in other languages
//! copy (docs/protocol.md), so a key parked by one client is read alike by all.

use redis::aio::ConnectionLike;
use redis::RedisResult;
use serde::{Deserialize, Serialize};

/// `<prefix><topic>:{<group>}:parked`: a group's parked keys of a topic.
pub fn parked_key(prefix: &str, topic: &str, group: &str) -> String {
    format!("{prefix}{topic}:{{{group}}}:parked")
}

/// `<prefix><topic>:{<group>}:held:<key>`: the entries held behind a parked key, oldest first.
pub fn held_key(prefix: &str, topic: &str, group: &str, key: &str) -> String {
    format!("{prefix}{topic}:{{{group}}}:held:{key}")
}

/// `<held key>:drain`: which consumer handles a released key's held entries now (expires).
pub fn drain_lock_key(held: &str) -> String {
    format!("{held}:drain")
}

/// A parked key's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// The event id of the dead entry that parked the key.
    pub dead_id: String,
    /// That entry's id in the dead stream, for a redrive.
    pub dead_entry: String,
    /// The stream it was read from (its partition's, on a partitioned topic).
    pub stream: String,
    /// When the key was parked, Unix milliseconds.
    pub since_ms: i64,
    /// An operator released it: the held entries are handled (a redriven dead entry first),
    /// then the key flows.
    #[serde(default)]
    pub released: bool,
}

/// One held entry: where it was read and its fields as the relay wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Its stream.
    pub stream: String,
    /// Its id there.
    pub id: String,
    /// Its fields, in order.
    pub fields: Vec<(String, String)>,
}

/// The fields the dead stream adds to an entry, which a redriven entry leaves behind.
pub const DEAD_FIELDS: [&str; 3] = ["error", "group", "deliveries"];

/// Parks a key behind its dead entry (unless parked behind another, unreleased).
/// KEYS, ARGV and reply: the header of `core/protocol/scripts/park.lua`.
const PARK: &str = include_str!("../protocol/scripts/park.lua");

/// Parks `key` in `parked` with `state` (see [`PARK`]); true when it was not parked before.
pub async fn park<C: ConnectionLike>(
    conn: &mut C,
    parked: &str,
    key: &str,
    state: &Parked,
) -> RedisResult<bool> {
    let json = serde_json::to_string(state).map_err(json_error)?;
    let n: i64 = redis::Script::new(PARK)
        .key(parked)
        .arg(key)
        .arg(json)
        .invoke_async(conn)
        .await?;
    Ok(n == 1)
}

/// What an operator does to a parked key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The dead entry stays dead; the held ones take effect.
    Discard,
    /// The dead entry is handled again first (these are its fields, as a [`Held`] in JSON).
    Redrive,
}

/// An operator's discard or redrive of a parked key; the entries released, or -1.
/// KEYS, ARGV and reply: the header of `core/protocol/scripts/release.lua`.
const RELEASE: &str = include_str!("../protocol/scripts/release.lua");

/// Releases a parked key; `Some(n)`: `n` entries will take effect (the redriven one
/// included), `None`: the key is not parked.
pub async fn release<C: ConnectionLike>(
    conn: &mut C,
    prefix: &str,
    topic: &str,
    group: &str,
    key: &str,
    how: Release,
    redriven: Option<&Held>,
) -> RedisResult<Option<u64>> {
    let entry = match redriven {
        Some(held) => serde_json::to_string(held).map_err(json_error)?,
        None => String::new(),
    };
    let n: i64 = redis::Script::new(RELEASE)
        .key(parked_key(prefix, topic, group))
        .key(held_key(prefix, topic, group, key))
        .arg(key)
        .arg(match how {
            Release::Discard => "discard",
            Release::Redrive => "redrive",
        })
        .arg(entry)
        .invoke_async(conn)
        .await?;
    Ok(u64::try_from(n).ok())
}

/// Forgets a released key whose held list is empty.
/// KEYS, ARGV and reply: the header of `core/protocol/scripts/unpark.lua`.
const UNPARK: &str = include_str!("../protocol/scripts/unpark.lua");

/// Forgets `key` once released and drained (see [`UNPARK`]).
pub async fn unpark<C: ConnectionLike>(
    conn: &mut C,
    parked: &str,
    held: &str,
    key: &str,
) -> RedisResult<bool> {
    let n: i64 = redis::Script::new(UNPARK)
        .key(parked)
        .key(held)
        .arg(key)
        .invoke_async(conn)
        .await?;
    Ok(n == 1)
}

/// Appends an entry to a parked key's held list; 0 when the key is not parked.
/// KEYS, ARGV and reply: the header of `core/protocol/scripts/hold.lua`.
const HOLD: &str = include_str!("../protocol/scripts/hold.lua");

/// Appends `entry` to `key`'s held list if the key is still parked (see [`HOLD`]).
pub async fn hold<C: ConnectionLike>(
    conn: &mut C,
    parked: &str,
    held: &str,
    key: &str,
    entry: &Held,
) -> RedisResult<bool> {
    let json = serde_json::to_string(entry).map_err(json_error)?;
    let n: i64 = redis::Script::new(HOLD)
        .key(parked)
        .key(held)
        .arg(key)
        .arg(json)
        .invoke_async(conn)
        .await?;
    Ok(n == 1)
}

/// Removes the held list's first entry if it is still the one handled.
/// KEYS, ARGV and reply: the header of `core/protocol/scripts/pop.lua`.
const POP: &str = include_str!("../protocol/scripts/pop.lua");

/// Removes `first` from the front of `held` if it is still there (handled, or dead again).
pub async fn pop<C: ConnectionLike>(conn: &mut C, held: &str, first: &str) -> RedisResult<bool> {
    let n: i64 = redis::Script::new(POP)
        .key(held)
        .arg(first)
        .invoke_async(conn)
        .await?;
    Ok(n == 1)
}

/// Every parked key of `parked` with its state (an unreadable state is skipped: not ours).
pub async fn parked_keys<C: ConnectionLike>(
    conn: &mut C,
    parked: &str,
) -> RedisResult<Vec<(String, Parked)>> {
    let all: Vec<(String, String)> = redis::cmd("HGETALL").arg(parked).query_async(conn).await?;
    let mut keys: Vec<(String, Parked)> = all
        .into_iter()
        .filter_map(|(key, json)| Some((key, serde_json::from_str(&json).ok()?)))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(keys)
}

fn json_error(e: serde_json::Error) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "parked-key state", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_state_shares_one_slot() {
        use redis::cluster_routing::Slot;
        let parked = parked_key("outbox:", "orders", "billing");
        let held = held_key("outbox:", "orders", "billing", "k{1}");
        assert_eq!(
            Slot::for_key(parked.as_bytes()),
            Slot::for_key(held.as_bytes())
        );
        assert_eq!(
            Slot::for_key(held.as_bytes()),
            Slot::for_key(drain_lock_key(&held).as_bytes())
        );
    }

    #[test]
    fn a_state_reads_back() {
        let state = Parked {
            dead_id: "e1".into(),
            dead_entry: "1-0".into(),
            stream: "outbox:orders".into(),
            since_ms: 5,
            released: false,
        };
        let json = serde_json::to_string(&state).expect("json");
        assert_eq!(serde_json::from_str::<Parked>(&json).expect("back"), state);
    }
}
