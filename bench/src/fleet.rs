//! The fleet scenario: every workload topic in 8 partitions, divided among 3 inbox consumers
//! of one group by the consumer library. Its drains (relay only, and end to end) run with the
//! throughput rounds and its latency with the steady rates; this module holds its shape and
//! measures what only a fleet has: how long a consumer that joins a busy group takes to get
//! its share of the partitions.

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::endtoend::{self, Consumers, GROUP};
use crate::harness::{self, BenchEnv, FleetShape, RelayProcess, Scratch, TOPICS};
use crate::machine::Meter;
use crate::report::Figure;
use crate::traffic::{self, Moments};

/// The fleet scenario's shape.
pub const SHAPE: FleetShape = FleetShape {
    partitions: 8,
    consumers: 3,
};

/// With `SHAPE.consumers - 1` consumers balanced under a steady `rate`, starts one more and
/// times until every topic's partitions are balanced over all of them (owned counts within
/// one of each other); then checks every event took effect once. The producers run for
/// `producing` (long enough to cover the join: at least 10 s).
pub async fn join(
    env: &BenchEnv,
    rate: u64,
    producing: Duration,
    name: &str,
) -> anyhow::Result<Figure> {
    let env = env.with_fleet(SHAPE);
    let scratch = Scratch::new(&env).await?;
    let producing = producing.max(Duration::from_secs(10));
    let result = join_in(&scratch, &env, (rate, producing), name).await;
    scratch.cleanup().await;
    result
}

async fn join_in(
    scratch: &Scratch,
    env: &BenchEnv,
    (rate, producing): (u64, Duration),
    name: &str,
) -> anyhow::Result<Figure> {
    let mut conn = scratch.conn().await?;
    endtoend::create_effects(&mut conn).await?;
    let groups = endtoend::groups_setting();
    let relay = RelayProcess::start(scratch, env, "bench-join", &[("OUTBOX__GROUPS", &groups)])?;
    let mut names: Vec<String> = (0..SHAPE.consumers - 1)
        .map(|c| format!("bench-{c}"))
        .collect();
    let first = Consumers::start_named(scratch, env, Moments::default(), names.clone())?;
    let total = rate * producing.as_secs();
    let mut meter_redis = env.redis().await?;
    let meter = Meter::start(&mut meter_redis).await;
    let producing = {
        let url = scratch.url.clone();
        tokio::spawn(async move { traffic::produce(&url, rate, total).await })
    };
    let mut redis = harness::redis_link(env)?;
    wait_balanced(&mut redis, scratch, &names, Duration::from_secs(30)).await?;
    let joining = format!("bench-{}", SHAPE.consumers - 1);
    let joined = Instant::now();
    let late = Consumers::start_named(scratch, env, Moments::default(), vec![joining.clone()])?;
    names.push(joining);
    wait_balanced(&mut redis, scratch, &names, Duration::from_secs(60)).await?;
    let seconds = joined.elapsed().as_secs_f64();
    producing.await??;
    let deadline = Instant::now() + Duration::from_secs(60);
    while endtoend::effects(&mut conn).await? < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(late);
    drop(first);
    let load = meter.stop(&mut meter_redis).await;
    let (cpu, rss) = relay.stop();
    let applied = endtoend::effects(&mut conn).await?;
    anyhow::ensure!(
        applied == total,
        "{applied} effects for {total} events: each must take effect once"
    );
    eprintln!("bench: {name}: balanced {seconds:.2} s after the join, {applied} effects for {total} events");
    Ok(Figure {
        scenario: name.to_string(),
        events: total,
        seconds: Some(seconds),
        cpu_seconds: Some(cpu),
        peak_rss_mb: Some(rss),
        redis_cpu_seconds: load.redis_cpu,
        busy_cores: load.busy_cores,
        ..Figure::default()
    })
}

/// Waits until every workload topic's partitions are owned by `live` consumers, their counts
/// within one of each other.
async fn wait_balanced(
    redis: &mut (impl ConnectionLike + Send),
    scratch: &Scratch,
    live: &[String],
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let owners = owners(redis, scratch).await?;
        if balanced(&owners, live) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "partitions not balanced over {live:?} within {within:?}: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each topic's partitions' owners (the fleet's lease keys), topic after topic.
async fn owners(
    redis: &mut (impl ConnectionLike + Send),
    scratch: &Scratch,
) -> anyhow::Result<Vec<Vec<Option<String>>>> {
    let mut out = Vec::new();
    for t in 0..TOPICS {
        let topic = format!("bench.topic{t}");
        let mut pipe = redis::pipe();
        for stream in outbox_core::keys::partition_keys(&scratch.prefix, &topic, SHAPE.partitions) {
            pipe.cmd("GET")
                .arg(outbox_core::keys::partition_owner(&stream, GROUP));
        }
        out.push(pipe.query_async(redis).await?);
    }
    Ok(out)
}

/// Every partition of every topic owned by one of `live`, each topic's counts within one.
fn balanced(owners: &[Vec<Option<String>>], live: &[String]) -> bool {
    owners.iter().all(|topic| {
        let counts: Vec<usize> = live
            .iter()
            .map(|name| topic.iter().filter(|o| o.as_deref() == Some(name)).count())
            .collect();
        let owned: usize = counts.iter().sum();
        let (lo, hi) = (counts.iter().min(), counts.iter().max());
        owned == topic.len() && lo.zip(hi).is_some_and(|(lo, hi)| hi - lo <= 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_needs_every_partition_owned_by_the_live_within_one() {
        let live = vec!["a".to_string(), "b".to_string()];
        let o = |names: &[&str]| {
            names
                .iter()
                .map(|n| (!n.is_empty()).then(|| n.to_string()))
                .collect::<Vec<_>>()
        };
        assert!(balanced(&[o(&["a", "b", "a", "b"])], &live));
        assert!(balanced(&[o(&["a", "b", "a"])], &live));
        assert!(!balanced(&[o(&["a", "a", "a", "b"])], &live));
        assert!(!balanced(&[o(&["a", "b", "", "b"])], &live));
        assert!(!balanced(&[o(&["a", "b", "c", "b"])], &live));
    }
}
