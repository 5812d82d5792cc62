//! What a scenario cost the machine beyond the relay: cores busy (from `/proc/stat`) and Redis
//! CPU seconds (from `INFO cpu`) over the measured span.
//!
//! On a small machine the relay shares its cores with Postgres, Redis and the producers, so a
//! speed figure means little without knowing whether the cores were saturated: a drain that
//! keeps every core busy is CPU-bound, whatever the relay does. Both readings are
//! machine-wide (the bench expects the machine otherwise idle), and each is absent where it
//! cannot be read.

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::Value;

/// Readings at the start of a span.
pub struct Meter {
    jiffies: Option<(u64, u64)>,
    redis_cpu: Option<f64>,
    started: Instant,
}

/// What a span cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct Load {
    /// Average number of cores busy (user, system, irq: everything but idle and I/O wait).
    pub busy_cores: Option<f64>,
    /// CPU seconds the Redis server spent.
    pub redis_cpu: Option<f64>,
}

/// Busy and total jiffies summed over all cores (the `cpu` line of `/proc/stat`).
fn jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// CPU seconds of the server, or the sum over a cluster's masters (there INFO goes to each
/// and the reply maps each node to its text).
async fn redis_cpu(redis: &mut (impl ConnectionLike + Send)) -> Option<f64> {
    let reply: Value = redis::cmd("INFO")
        .arg("cpu")
        .query_async(redis)
        .await
        .ok()?;
    let cpu = |info: &Value| -> Option<f64> {
        let info: String = redis::from_redis_value_ref(info).ok()?;
        let field = |name: &str| -> Option<f64> {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        };
        Some(field("used_cpu_sys")? + field("used_cpu_user")?)
    };
    match &reply {
        Value::Map(nodes) => nodes.iter().map(|(_, info)| cpu(info)).sum(),
        single => cpu(single),
    }
}

impl Meter {
    /// Reads the counters now.
    pub async fn start(redis: &mut (impl ConnectionLike + Send)) -> Meter {
        Meter {
            jiffies: jiffies(),
            redis_cpu: redis_cpu(redis).await,
            started: Instant::now(),
        }
    }

    /// Reads them again: the cost since [`Meter::start`].
    pub async fn stop(self, redis: &mut (impl ConnectionLike + Send)) -> Load {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let busy_cores = match (self.jiffies, jiffies()) {
            (Some((busy0, total0)), Some((busy1, total1))) if total1 > total0 => {
                Some((busy1 - busy0.min(busy1)) as f64 / (total1 - total0) as f64 * cores)
            }
            _ => None,
        };
        let redis_cpu = match (self.redis_cpu, redis_cpu(redis).await) {
            (Some(before), Some(after)) => Some((after - before).max(0.0)),
            _ => None,
        };
        tracing::debug!(elapsed = ?self.started.elapsed(), ?busy_cores, ?redis_cpu, "bench span");
        Load {
            busy_cores,
            redis_cpu,
        }
    }
}
