//! How full Redis is: `used_memory` over `maxmemory` from `INFO memory` (the fullest master of
//! a cluster). Above `redis.max_memory_ratio` the relay holds publishing, so Redis never
//! reaches the point where it refuses writes with OOM errors mid-batch.

use std::time::Duration;

use redis::Value;

use super::{PublishError, Publisher};

/// `used_memory / maxmemory` of one `INFO memory` text; `None` without a `maxmemory`.
pub fn ratio_of(info: &str) -> Option<f64> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let used = field("used_memory")?;
    match field("maxmemory")? {
        0 => None,
        max => Some(used as f64 / max as f64),
    }
}

/// The texts of an `INFO` reply: one, or one per node of a cluster.
fn texts(reply: &Value) -> Vec<String> {
    match reply {
        Value::BulkString(bytes) => vec![String::from_utf8_lossy(bytes).into_owned()],
        Value::VerbatimString { text, .. } => vec![text.clone()],
        Value::SimpleString(text) => vec![text.clone()],
        Value::Map(pairs) => pairs.iter().flat_map(|(_, v)| texts(v)).collect(),
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        _ => Vec::new(),
    }
}

impl Publisher {
    /// How full Redis is (the fullest master); `None` when no server has a `maxmemory`.
    pub async fn memory_ratio(&self) -> Result<Option<f64>, PublishError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("INFO");
        cmd.arg("memory");
        let info = cmd.query_async::<Value>(&mut conn);
        let reply = match tokio::time::timeout(Duration::from_secs(1), info).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(PublishError::Outage(e.to_string())),
            Err(_) => return Err(PublishError::Outage("INFO memory timed out".into())),
        };
        Ok(texts(&reply)
            .iter()
            .filter_map(|text| ratio_of(text))
            .reduce(f64::max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_used_over_max_and_none_without_a_max() {
        let info = "# Memory\r\nused_memory:750\r\nused_memory_human:750B\r\nmaxmemory:1000\r\nmaxmemory_human:1000B\r\n";
        assert_eq!(ratio_of(info), Some(0.75));
        assert_eq!(ratio_of("used_memory:750\r\nmaxmemory:0\r\n"), None);
        assert_eq!(ratio_of("nothing"), None);
        let cluster = Value::Map(vec![
            (
                Value::SimpleString("a".into()),
                Value::BulkString(b"used_memory:1\nmaxmemory:10\n".to_vec()),
            ),
            (
                Value::SimpleString("b".into()),
                Value::BulkString(b"used_memory:9\nmaxmemory:10\n".to_vec()),
            ),
        ]);
        let fullest = texts(&cluster)
            .iter()
            .filter_map(|t| ratio_of(t))
            .reduce(f64::max);
        assert_eq!(fullest, Some(0.9));
    }
}
