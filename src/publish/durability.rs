//! Waiting until a batch's writes are where `redis.wait_replicas` and `redis.wait_fsync` ask
//! (`WAIT`, `WAITAOF`) before its events may be marked published.
//!
//! Both commands wait for every write this client connection sent before them, so one call
//! after a topic's script calls covers all of them (and, on the shared connection, other
//! topics' writes sent meanwhile). On a cluster the client sends them to every master and
//! keeps the smallest count. A batch that is not confirmed in time is an outage for its
//! events: they stay pending and go out again, the dedup records making it one entry per id.

use std::time::Duration;

use redis::Value;

use super::{PublishError, RedisConn};

/// What must hold before a batch counts as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Durability {
    /// Replicas that must have the writes (`redis.wait_replicas`).
    pub replicas: u32,
    /// The master must have them in its append-only file (`redis.wait_fsync`).
    pub fsync: bool,
    /// How long Redis waits for them (`redis.wait_timeout`).
    pub timeout: Duration,
}

impl Durability {
    /// Whether anything is to be waited for.
    pub fn waits(&self) -> bool {
        self.replicas > 0 || self.fsync
    }

    fn timeout_ms(&self) -> u64 {
        // 0 would mean "forever" to Redis.
        u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// Why Redis cannot confirm writes as the settings ask.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} cannot be honoured: {reason}")]
pub struct Unsupported {
    /// The setting Redis cannot honour.
    pub setting: &'static str,
    /// What Redis said.
    pub reason: String,
}

/// Waits until the connection's writes so far are confirmed as `durability` asks; an error is
/// an outage of the batch (nothing may be marked published).
pub async fn confirm(
    conn: &RedisConn,
    durability: Durability,
    round_trip: Duration,
) -> Result<(), PublishError> {
    if !durability.waits() {
        return Ok(());
    }
    let mut conn = conn.clone();
    let mut cmd = if durability.fsync {
        let mut cmd = redis::cmd("WAITAOF");
        cmd.arg(1);
        cmd
    } else {
        redis::cmd("WAIT")
    };
    cmd.arg(durability.replicas).arg(durability.timeout_ms());
    let call = cmd.query_async::<Value>(&mut conn);
    let reply = match tokio::time::timeout(durability.timeout + round_trip, call).await {
        Err(_) => {
            return Err(PublishError::Outage(format!(
                "no answer to the wait for replicas within {:?}",
                durability.timeout + round_trip
            )))
        }
        Ok(Err(e)) => return Err(PublishError::Outage(e.to_string())),
        Ok(Ok(reply)) => reply,
    };
    let (fsynced, replicas) = counts(&reply, durability.fsync).ok_or_else(|| {
        PublishError::Outage(format!(
            "unexpected reply to the wait for replicas: {reply:?}"
        ))
    })?;
    if durability.fsync && fsynced < 1 {
        return Err(PublishError::Outage(format!(
            "the master did not write the batch to its append-only file within {:?}",
            durability.timeout
        )));
    }
    if replicas < i64::from(durability.replicas) {
        return Err(PublishError::Outage(format!(
            "{replicas} of {} replicas acknowledged the batch within {:?}",
            durability.replicas, durability.timeout
        )));
    }
    Ok(())
}

/// (local fsyncs, replicas) of a `WAIT` reply (an integer) or a `WAITAOF` reply (a pair); on a
/// cluster possibly one reply per master, of which the smallest counts.
fn counts(reply: &Value, fsync: bool) -> Option<(i64, i64)> {
    match (reply, fsync) {
        (Value::Int(n), false) => Some((1, *n)),
        (Value::Array(pair), true) if matches!(pair.as_slice(), [Value::Int(_), Value::Int(_)]) => {
            let [Value::Int(local), Value::Int(replicas)] = pair.as_slice() else {
                return None;
            };
            Some((*local, *replicas))
        }
        (Value::Array(per_master), _) | (Value::Set(per_master), _) if !per_master.is_empty() => {
            per_master
                .iter()
                .map(|one| counts(one, fsync))
                .try_fold((i64::MAX, i64::MAX), |(l, r), one| {
                    one.map(|(ol, or)| (l.min(ol), r.min(or)))
                })
        }
        (Value::Map(per_master), _) if !per_master.is_empty() => per_master
            .iter()
            .map(|(_, one)| counts(one, fsync))
            .try_fold((i64::MAX, i64::MAX), |(l, r), one| {
                one.map(|(ol, or)| (l.min(ol), r.min(or)))
            }),
        _ => None,
    }
}

/// Whether the server can confirm writes as `durability` asks: with `fsync`, a `WAITAOF`
/// that returns at once (Redis before 7.2 does not know it; without `appendonly` it refuses).
pub async fn check(conn: &RedisConn, durability: Durability) -> Result<(), Unsupported> {
    if !durability.fsync {
        return Ok(());
    }
    // Redis before 7.2 does not know WAITAOF; without an append-only file it refuses 1 local.
    let mut conn = conn.clone();
    let mut cmd = redis::cmd("WAITAOF");
    cmd.arg(1).arg(0).arg(1);
    let probe = cmd.query_async::<Value>(&mut conn);
    match tokio::time::timeout(Duration::from_secs(1), probe).await {
        Ok(Err(e))
            if matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::ResponseError | redis::ServerErrorKind::NoPerm
                )
            ) =>
        {
            Err(Unsupported {
                setting: "redis.wait_fsync",
                reason: e.to_string(),
            })
        }
        // Unreachable or slow: the Redis ping says so; it is not the setting's fault.
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_give_the_smallest_counts() {
        assert_eq!(counts(&Value::Int(2), false), Some((1, 2)));
        let pair = |l, r| Value::Array(vec![Value::Int(l), Value::Int(r)]);
        assert_eq!(counts(&pair(1, 0), true), Some((1, 0)));
        assert_eq!(
            counts(&Value::Array(vec![pair(1, 2), pair(0, 1)]), true),
            Some((0, 1))
        );
        assert_eq!(counts(&Value::Nil, false), None);
        let per_master = Value::Array(vec![Value::Int(2), Value::Int(1)]);
        assert_eq!(counts(&per_master, false), Some((1, 1)));
        assert_eq!(counts(&Value::Array(vec![]), true), None);
    }
}
