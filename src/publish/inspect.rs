//! Read-only looks into the topics' streams for the admin's Streams page: length, first and
//! last entry, consumer groups with their lag and pending counts, and the oldest pending
//! message of each group. Only TYPE, XINFO and XPENDING: nothing here writes to Redis.

use std::time::Duration;

use redis::Value;

use super::{keys, Publisher};

/// Longest a page waits for one stream's answers.
const TIMEOUT: Duration = Duration::from_secs(2);

/// A failed look.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// Redis answered with an error or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
}

/// One topic's stream.
#[derive(Debug, Clone, Default)]
pub struct StreamInfo {
    /// The topic.
    pub topic: String,
    /// Its key, `<stream_prefix><topic>`.
    pub key: String,
    /// What the key holds: `stream`, `none` (no entry yet), or another type (a misconfigured
    /// key: every publish into it fails).
    pub kind: String,
    /// Entries in the stream.
    pub length: u64,
    /// Id of the first entry.
    pub first_id: Option<String>,
    /// Id of the last entry.
    pub last_id: Option<String>,
    /// The partition, for one stream of a partitioned topic.
    pub partition: Option<u32>,
    /// Its consumer groups.
    pub groups: Vec<GroupInfo>,
}

/// One consumer group of a stream.
#[derive(Debug, Clone, Default)]
pub struct GroupInfo {
    /// The group name.
    pub name: String,
    /// Consumers in the group.
    pub consumers: u64,
    /// Entries delivered and not yet acknowledged.
    pub pending: u64,
    /// Entries not yet delivered to the group (Redis 7+; unknown after some deletions).
    pub lag: Option<u64>,
    /// The last entry delivered to the group.
    pub last_delivered_id: String,
    /// The oldest unacknowledged entry, and how long ago it was added to the stream.
    pub oldest_pending: Option<(String, Duration)>,
    /// How long ago that entry was last delivered to a consumer (`XPENDING`'s idle time): it
    /// grows while nobody handles it, a consumer that died holding it included.
    pub oldest_pending_idle: Option<Duration>,
    /// On a partition: the consumer holding the group's lease of it (the consumer library's
    /// fleet), if any.
    pub owner: Option<String>,
    /// On a partition: the lease's fencing epoch (how many times it was taken).
    pub epoch: Option<u64>,
}

/// Field/value pairs of a reply, whether RESP2 (flat array) or RESP3 (map).
fn pairs(v: Value) -> Vec<(String, Value)> {
    let list = match v {
        Value::Map(m) => return m.into_iter().map(|(k, v)| (text(&k), v)).collect(),
        Value::Array(a) => a,
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut it = list.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((text(&k), v));
    }
    out
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Okay => "OK".into(),
        _ => String::new(),
    }
}

fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other).parse().ok(),
    }
}

/// The id of an entry reply `[id, [fields...]]`.
fn entry_id(v: &Value) -> Option<String> {
    match v {
        Value::Array(a) => a.first().map(text),
        _ => None,
    }
}

/// How long ago an entry id's milliseconds part was.
fn id_age(id: &str) -> Duration {
    let ms: u64 = id
        .split('-')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    Duration::from_millis(now.saturating_sub(ms))
}

impl Publisher {
    /// Looks at the streams of each topic, in the given order: its one stream, or each of its
    /// partitions (by the counts in `<prefix>partitions`).
    pub async fn inspect_streams(
        &self,
        topics: &[String],
    ) -> Result<Vec<StreamInfo>, InspectError> {
        let counts = self.partition_counts().await.unwrap_or_default();
        let mut out = Vec::with_capacity(topics.len());
        for topic in topics {
            let partitions = counts.get(topic).copied().unwrap_or(1);
            for key in keys::partition_keys(&self.config.stream_prefix, topic, partitions) {
                let look = self.inspect_stream(topic, &key);
                let info = tokio::time::timeout(TIMEOUT, look)
                    .await
                    .map_err(|_| InspectError::Timeout(TIMEOUT))??;
                out.push(info);
            }
        }
        Ok(out)
    }

    /// Looks at one stream of `topic` (one of its partitions).
    pub async fn inspect_stream(&self, topic: &str, key: &str) -> Result<StreamInfo, InspectError> {
        let mut conn = self.conn.clone();
        let key = key.to_string();
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await?;
        let partition = key
            .strip_prefix(&keys::stream_key(&self.config.stream_prefix, topic))
            .and_then(|rest| rest.strip_prefix(':'))
            .and_then(|p| p.parse().ok());
        let mut info = StreamInfo {
            topic: topic.to_string(),
            key: key.clone(),
            kind,
            partition,
            ..StreamInfo::default()
        };
        if info.kind != "stream" {
            return Ok(info);
        }
        let stream: Value = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        for (name, value) in pairs(stream) {
            match name.as_str() {
                "length" => info.length = int(&value).unwrap_or(0),
                "first-entry" => info.first_id = entry_id(&value),
                "last-entry" => info.last_id = entry_id(&value),
                _ => {}
            }
        }
        let groups: Value = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let Value::Array(groups) = groups else {
            return Ok(info);
        };
        for g in groups {
            let mut group = GroupInfo::default();
            for (name, value) in pairs(g) {
                match name.as_str() {
                    "name" => group.name = text(&value),
                    "consumers" => group.consumers = int(&value).unwrap_or(0),
                    "pending" => group.pending = int(&value).unwrap_or(0),
                    "lag" => group.lag = int(&value),
                    "last-delivered-id" => group.last_delivered_id = text(&value),
                    _ => {}
                }
            }
            if group.pending > 0 {
                // The extended form names the oldest unacknowledged entry itself.
                let oldest: Value = redis::cmd("XPENDING")
                    .arg(&key)
                    .arg(&group.name)
                    .arg("-")
                    .arg("+")
                    .arg(1)
                    .query_async(&mut conn)
                    .await?;
                if let Value::Array(rows) = oldest {
                    group.oldest_pending = rows
                        .first()
                        .and_then(entry_id)
                        .map(|id| (id.clone(), id_age(&id)));
                    // A row is [id, consumer, idle ms, deliveries].
                    group.oldest_pending_idle = rows
                        .first()
                        .and_then(|row| match row {
                            Value::Array(fields) => fields.get(2).and_then(int),
                            _ => None,
                        })
                        .map(Duration::from_millis);
                }
            }
            if info.partition.is_some() {
                let (owner, epoch) = self.partition_lease(&key, &group.name).await?;
                group.owner = owner;
                group.epoch = epoch;
            }
            info.groups.push(group);
        }
        Ok(info)
    }

    /// The lease of partition stream `key` for `group` that the consumer library's fleet
    /// keeps: its owner and epoch (both keys in the stream's slot).
    async fn partition_lease(
        &self,
        key: &str,
        group: &str,
    ) -> Result<(Option<String>, Option<u64>), InspectError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(outbox_core::keys::partition_owner(key, group));
        pipe.cmd("GET")
            .arg(outbox_core::keys::partition_epoch(key, group));
        Ok(pipe.query_async(&mut conn).await?)
    }

    /// How many consumers of `group` are live members of `topic`'s fleet (membership not
    /// expired by this relay's clock); `None` when the group keeps no fleet there.
    pub async fn fleet_members(
        &self,
        topic: &str,
        group: &str,
    ) -> Result<Option<u64>, InspectError> {
        let mut conn = self.conn.clone();
        let key = outbox_core::keys::fleet_members(&self.config.stream_prefix, topic, group);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (exists, live): (bool, u64) = redis::pipe()
            .cmd("EXISTS")
            .arg(&key)
            .cmd("ZCOUNT")
            .arg(&key)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut conn)
            .await?;
        Ok(exists.then_some(live))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_of_both_protocols_read_as_pairs() {
        let flat = Value::Array(vec![
            Value::BulkString(b"length".to_vec()),
            Value::Int(3),
            Value::BulkString(b"first-entry".to_vec()),
            Value::Array(vec![
                Value::BulkString(b"1-0".to_vec()),
                Value::Array(vec![]),
            ]),
        ]);
        let p = pairs(flat);
        assert_eq!(p[0].0, "length");
        assert_eq!(int(&p[0].1), Some(3));
        assert_eq!(entry_id(&p[1].1).as_deref(), Some("1-0"));
        let map = Value::Map(vec![(Value::SimpleString("lag".into()), Value::Nil)]);
        let p = pairs(map);
        assert_eq!((p[0].0.as_str(), int(&p[0].1)), ("lag", None));
        assert!(id_age("0-1") > Duration::from_secs(1_000_000));
    }
}
