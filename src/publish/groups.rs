//! The declared consumer groups on the Redis side: created before their topic's first publish,
//! and, with `redis.trim_acked`, their stream trimmed up to the oldest entry one of them has not
//! acknowledged.

use redis::Value;
use std::collections::HashMap;

use super::{classify_error, keys, PublishError, Publisher, Verdict};
use crate::config::GroupSpec;

/// One atomic look-and-trim per stream, so no group can read or leave an entry pending
/// between the look and the trim. An entry a declared group has not acknowledged (pending) or
/// not yet read (after its last delivered id) is never trimmed. A declared group missing from
/// the stream (deleted by hand, or Redis lost it) stops the trim: nobody knows what it has
/// read. Returns `{trimmed, minid}`, or `{-1, group}` for a missing group.
const TRIM_ACKED: &str = r#"
local function parse(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return {0, ''} end
local found = {}
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  found[f['name']] = f
end
local lo_ms, lo_seq
for _, name in ipairs(ARGV) do
  local f = found[name]
  if not f then return {-1, name} end
  local ms, seq
  if f['pending'] > 0 then
    ms, seq = parse(redis.call('XPENDING', KEYS[1], name)[2])
  else
    ms, seq = parse(f['last-delivered-id'])
    seq = seq + 1
  end
  if lo_ms == nil or ms < lo_ms or (ms == lo_ms and seq < lo_seq) then
    lo_ms, lo_seq = ms, seq
  end
end
if lo_ms == nil then return {0, ''} end
local minid = string.format('%.0f-%.0f', lo_ms, lo_seq)
return {redis.call('XTRIM', KEYS[1], 'MINID', minid), minid}
"#;

/// What one trim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trim {
    /// Entries below `minid` were removed (`removed` may be 0).
    Trimmed {
        /// Entries removed.
        removed: u64,
        /// Every entry from this id on is kept.
        minid: String,
    },
    /// Nothing trimmed: this declared group does not exist on the stream.
    GroupMissing(String),
}

fn outage(e: redis::RedisError) -> PublishError {
    PublishError::Outage(e.to_string())
}

impl Publisher {
    /// The `<prefix>partitions` hash: each partitioned topic's count (a topic not there has
    /// one partition).
    pub async fn partition_counts(&self) -> Result<HashMap<String, u32>, PublishError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(keys::partitions_hash(&self.config.stream_prefix));
        let read = cmd.query_async::<HashMap<String, u32>>(&mut conn);
        match tokio::time::timeout(self.config.timeout, read).await {
            Ok(result) => result.map_err(outage),
            Err(_) => Err(PublishError::Outage("HGETALL partitions timed out".into())),
        }
    }

    /// Creates each of `groups` (all of `topic`) that a stream of the topic's `partitions` does
    /// not have yet, with the stream itself if need be. A group that exists is left as it is. A
    /// key that is not a stream is left to the publish, which fails its events for it.
    pub async fn ensure_groups(
        &self,
        topic: &str,
        groups: &[GroupSpec],
        partitions: u32,
    ) -> Result<(), PublishError> {
        for key in outbox_core::keys::partition_keys(&self.config.stream_prefix, topic, partitions)
        {
            self.ensure_groups_on(topic, &key, groups).await?;
        }
        Ok(())
    }

    async fn ensure_groups_on(
        &self,
        topic: &str,
        key: &str,
        groups: &[GroupSpec],
    ) -> Result<(), PublishError> {
        let mut conn = self.conn.clone();
        for group in groups {
            let create = outbox_core::groups::create(&mut conn, key, &group.name, &group.start);
            let created = match tokio::time::timeout(self.config.timeout, create).await {
                Ok(result) => result,
                Err(_) => return Err(PublishError::Outage("XGROUP CREATE timed out".into())),
            };
            match created {
                Ok(true) => {
                    tracing::info!(%topic, stream = %key, group = %group.name, start = %group.start, "consumer group created");
                }
                Ok(false) => {}
                Err(e) if classify_error(&e) == Verdict::EventFault => {
                    tracing::warn!(%topic, group = %group.name, "consumer group not created: {e}");
                }
                Err(e) => return Err(outage(e)),
            }
        }
        Ok(())
    }

    /// Trims the stream `key` up to the oldest entry one of `groups` has not acknowledged.
    pub async fn trim_acked(&self, key: &str, groups: &[&str]) -> Result<Trim, PublishError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(TRIM_ACKED).arg(1).arg(key).arg(groups);
        let reply: Value =
            match tokio::time::timeout(self.config.timeout, cmd.query_async(&mut conn)).await {
                Ok(result) => result.map_err(outage)?,
                Err(_) => return Err(PublishError::Outage("trim timed out".into())),
            };
        let (count, text): (i64, String) = redis::from_redis_value(reply)
            .map_err(|e| PublishError::Outage(format!("trim reply: {e}")))?;
        Ok(match u64::try_from(count) {
            Ok(removed) => Trim::Trimmed {
                removed,
                minid: text,
            },
            Err(_) => Trim::GroupMissing(text),
        })
    }
}
