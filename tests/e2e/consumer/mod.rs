//! The consumer side: `consumer/examples/inbox_consumer` processes fed by a real relay (SIGKILLed and
//! restarted: every event applied once; a dead consumer's entries claimed; poison to the dead
//! stream), and the `outbox_consumer` library in-process (per-key order through failures and
//! a restart; a malformed entry dead-lettered without blocking its key).
//!
//! By concern: [`processes`] (example consumers fed by a relay), [`claims`], [`order`],
//! [`batches`], [`failures`], [`inbox`], [`connections`], [`parking`] (a group's parked keys).

mod batches;
mod claims;
mod connections;
mod failures;
mod inbox;
mod order;
mod parking;
mod processes;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry, HandlerError};

use crate::support::*;

const GROUP: &str = EFFECTS_GROUP;

/// Completes when `stop` is notified: a consumer's shutdown signal in these tests.
fn notified(stop: &Arc<tokio::sync::Notify>) -> impl std::future::Future<Output = ()> {
    let stop = stop.clone();
    async move { stop.notified().await }
}

/// A consumer on the test's prefix: quick retries, short blocks.
fn library_config(redis: &TestRedis, topic: &str, name: &str) -> ConsumerConfig {
    ConsumerConfig::new(&redis.url, topic, GROUP)
        .stream_prefix(&redis.prefix)
        .consumer(name)
        .concurrency(8)
        .batch_size(50)
        .block(Duration::from_millis(200))
        .claim_idle(Duration::from_secs(60))
        .retry(Duration::from_millis(10), Duration::from_millis(100))
}
