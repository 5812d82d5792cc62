//! A consumer group's parked keys as the admin sees and releases them (contract section 13;
//! the state is `outbox_core::parked`'s, which the consumer library writes): each key with
//! its dead entry and how many entries it holds, and the discard or redrive that releases one.

use outbox_core::parked::{self, Held, Parked, Release};

use super::{PublishError, Publisher};

/// One parked key of a group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupParked {
    /// The partition key.
    pub key: String,
    /// Its state.
    pub state: Parked,
    /// Entries held behind it.
    pub held: u64,
}

/// Why a key could not be released.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// It is not parked (or released already).
    #[error("key {0:?} is not parked in this group")]
    NotParked(String),
    /// A redrive whose dead entry is no longer in the dead stream (trimmed or deleted).
    #[error("the dead entry {0} is no longer in the dead stream: discard the key instead")]
    DeadEntryGone(String),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] PublishError),
}

fn outage(e: redis::RedisError) -> PublishError {
    PublishError::Outage(e.to_string())
}

impl Publisher {
    /// The parked keys of `group` on `topic`, by key.
    pub async fn group_parked(
        &self,
        topic: &str,
        group: &str,
    ) -> Result<Vec<GroupParked>, PublishError> {
        let prefix = &self.config.stream_prefix;
        let mut conn = self.conn.clone();
        let hash = parked::parked_key(prefix, topic, group);
        let states = parked::parked_keys(&mut conn, &hash)
            .await
            .map_err(outage)?;
        let mut out = Vec::with_capacity(states.len());
        for (key, state) in states {
            let held: u64 = redis::cmd("LLEN")
                .arg(parked::held_key(prefix, topic, group, &key))
                .query_async(&mut conn)
                .await
                .map_err(outage)?;
            out.push(GroupParked { key, state, held });
        }
        Ok(out)
    }

    /// Releases `key` of `group`: its held entries take effect, after the dead entry handled
    /// again first for a redrive. Returns how many entries will take effect.
    pub async fn release_parked(
        &self,
        topic: &str,
        group: &str,
        key: &str,
        how: Release,
    ) -> Result<u64, ReleaseError> {
        let prefix = &self.config.stream_prefix;
        let mut conn = self.conn.clone();
        let redriven = match how {
            Release::Discard => None,
            Release::Redrive => Some(self.dead_entry(topic, group, key).await?),
        };
        parked::release(&mut conn, prefix, topic, group, key, how, redriven.as_ref())
            .await
            .map_err(outage)?
            .ok_or_else(|| ReleaseError::NotParked(key.to_string()))
    }

    /// The dead entry that parks `key`, as a held entry (without the dead stream's fields).
    async fn dead_entry(&self, topic: &str, group: &str, key: &str) -> Result<Held, ReleaseError> {
        let prefix = &self.config.stream_prefix;
        let mut conn = self.conn.clone();
        let state: Option<String> = redis::cmd("HGET")
            .arg(parked::parked_key(prefix, topic, group))
            .arg(key)
            .query_async(&mut conn)
            .await
            .map_err(outage)?;
        let state: Parked = state
            .and_then(|s| serde_json::from_str(&s).ok())
            .filter(|s: &Parked| !s.released)
            .ok_or_else(|| ReleaseError::NotParked(key.to_string()))?;
        let found: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(outbox_core::keys::dead_key(prefix, topic))
            .arg(&state.dead_entry)
            .arg(&state.dead_entry)
            .query_async(&mut conn)
            .await
            .map_err(|_| ReleaseError::DeadEntryGone(state.dead_entry.clone()))?;
        let entry = found
            .ids
            .into_iter()
            .next()
            .ok_or_else(|| ReleaseError::DeadEntryGone(state.dead_entry.clone()))?;
        let mut fields: Vec<(String, String)> = entry
            .map
            .into_iter()
            .filter(|(field, _)| !parked::DEAD_FIELDS.contains(&field.as_str()))
            .filter_map(|(field, value)| Some((field, outbox_core::entry::value_text(&value)?)))
            .collect();
        // The map lost the order; the id first, as the relay writes it.
        fields.sort_by_key(|(field, _)| field != "id");
        Ok(Held {
            stream: state.stream,
            id: state.dead_entry,
            fields,
        })
    }
}
