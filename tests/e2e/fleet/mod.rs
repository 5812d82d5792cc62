//! A consumer group's fleet on a partitioned topic: `consumer/examples/inbox_consumer` processes divide
//! the partitions (at most one owner each, counts within one of each other after joins and
//! leaves), and keep each key's events in commit order through SIGKILLs, freezes past the
//! lease (SIGSTOP, SIGCONT), scale-up and scale-down; the inbox's fence refuses the commit of
//! a consumer whose partition has a newer owner.
//!
//! Order is judged by commit order: a trigger on `example_effects` refuses (raises) an
//! effect whose key has an earlier event without a committed effect, so an effect out of
//! order, or two of one key at once, shows as "ORDER VIOLATION" in a consumer's log.
//!
//! By concern: [`balance`], [`chaos`], [`fencing`], [`handlers`], [`parking`], [`repartition`]; the
//! helpers they share (the relay's settings, lease owners, balance, pending, the order check)
//! are here.

mod balance;
mod chaos;
mod fencing;
mod handlers;
mod parking;
mod repartition;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use crate::support::*;

const PARTITIONS: u32 = 8;

/// The fleet's consumers: the chaos run's (a short lease, so freezes and kills are felt
/// within seconds).
const FLEET_ARGS: &[&str] = CHAOS_ARGS;

fn relay_env(db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
    relay_env_with(db, redis, PARTITIONS)
}

fn relay_env_with(db: &TestDb, redis: &TestRedis, partitions: u32) -> Vec<(String, String)> {
    let mut env = base_env(db, redis);
    env.push(("OUTBOX__TOPICS".into(), format!("t0:{partitions}")));
    env.push(("OUTBOX__GROUPS".into(), format!("t0:{EFFECTS_GROUP}")));
    env
}

fn spawn(db: &TestDb, redis: &TestRedis, name: &str) -> ExampleConsumer {
    ExampleConsumer::spawn(db, redis, "t0", EFFECTS_GROUP, name, FLEET_ARGS)
}

/// Each partition's owner in the example consumers' group, from its lease key.
async fn owners(redis: &TestRedis) -> Vec<Option<String>> {
    owners_of(redis, EFFECTS_GROUP, PARTITIONS).await
}

async fn owners_of(redis: &TestRedis, group: &str, partitions: u32) -> Vec<Option<String>> {
    let mut c = redis.reader().await;
    let mut out = Vec::new();
    for p in 0..partitions {
        let key = outbox_core::keys::partition_owner(&redis.stream(&format!("t0:{p}")), group);
        out.push(c.get(key).await.expect("get owner"));
    }
    out
}

/// Every partition owned, by live consumers only, counts within one of each other.
fn balanced(owners: &[Option<String>], live: &[String]) -> Result<(), String> {
    let mut counts: HashMap<&str, usize> = live.iter().map(|n| (n.as_str(), 0)).collect();
    for (p, owner) in owners.iter().enumerate() {
        let Some(owner) = owner else {
            return Err(format!("partition {p} has no owner: {owners:?}"));
        };
        match counts.get_mut(owner.as_str()) {
            Some(n) => *n += 1,
            None => {
                return Err(format!(
                    "partition {p} owned by {owner}, not live: {owners:?}"
                ))
            }
        }
    }
    let (lo, hi) = (counts.values().min(), counts.values().max());
    match lo.zip(hi) {
        Some((lo, hi)) if hi - lo <= 1 => Ok(()),
        _ => Err(format!("unbalanced {counts:?}")),
    }
}

/// The partitions `name` owns.
fn owned_by(owners: &[Option<String>], name: &str) -> Vec<usize> {
    (0..owners.len())
        .filter(|p| owners[*p].as_deref() == Some(name))
        .collect()
}

async fn wait_balanced(redis: &TestRedis, live: &[String], within: Duration) -> Duration {
    let start = Instant::now();
    wait_until(within, || async { balanced(&owners(redis).await, live) }).await;
    start.elapsed()
}

fn signal(consumer: &ExampleConsumer, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &consumer.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// The group's pending entries over all partitions.
async fn pending(redis: &TestRedis) -> usize {
    pending_of(redis, PARTITIONS).await
}

async fn pending_of(redis: &TestRedis, partitions: u32) -> usize {
    let mut total = 0;
    for p in 0..partitions {
        // The relay declares the group on every partition: a missing one is an error.
        total += group_pending(redis, &format!("t0:{p}"), EFFECTS_GROUP)
            .await
            .0;
    }
    total
}

/// The trigger that judges order by commit order (see the module's documentation).
const ORDER_CHECK: &str = "
CREATE TABLE example_effects (
    event_id uuid NOT NULL,
    topic text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON example_effects (event_id);
CREATE FUNCTION fleet_order_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE k text; n bigint;
BEGIN
  SELECT partition_key, (payload->>'n')::bigint INTO k, n FROM outbox WHERE id = NEW.event_id;
  IF EXISTS (SELECT 1 FROM outbox o
             WHERE o.topic = NEW.topic AND o.partition_key = k AND (o.payload->>'n')::bigint < n
               AND NOT EXISTS (SELECT 1 FROM example_effects e WHERE e.event_id = o.id)) THEN
    RAISE EXCEPTION 'ORDER VIOLATION: event % of key % before an earlier event of its key', n, k;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER fleet_order_check BEFORE INSERT ON example_effects
  FOR EACH ROW EXECUTE FUNCTION fleet_order_check();
";
