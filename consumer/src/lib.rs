//! outbox-consumer: reads the Redis Streams that outbox-relay writes (one stream per topic,
//! `<stream_prefix><topic>`) as a member of a consumer group.
//!
//! The map of the crate:
//!
//! | module | what it is for |
//! |---|---|
//! | [`entry`] | [`Entry`], one event parsed from a stream entry's fields; its JSON form |
//! | [`config`] | [`ConsumerConfig`], every setting with its default, validated |
//! | [`consumer`] | [`Consumer`]: the loop (own pending entries first, then new ones), lanes, acks, dead letters, claims |
//! | `handling` | one batch: checks before a handler, per-entry lanes or whole batches, retry or dead stream |
//! | [`lanes`] | splitting a batch by partition key: keys concurrently, one key in order |
//! | [`redis_conn`] | [`RedisConn`]: one server or a Redis Cluster, TLS files applied |
//! | [`retry`] | retry and outage delays with jitter; rate-limited error logs |
//! | `inbox` (feature `inbox`, on by default) | exactly-once effects: the effect and the `outbox_inbox` row in one Postgres transaction |
//! | `prepared` (feature `inbox`) | raw SQL a connection keeps prepared (the inbox's, yours, the relay's) |
//!
//! Delivery is at least once: an entry is acknowledged only after its handler returned `Ok`,
//! so a crash in between redelivers it. Make effects idempotent, or use
//! [`Consumer::run_inbox`] (feature `inbox`), which skips an event already applied.
//!
//! ```no_run
//! use outbox_consumer::{Consumer, ConsumerConfig, Entry};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ConsumerConfig::new("redis://127.0.0.1:6379", "order.created", "billing")
//!     .consumer("billing-0")
//!     .max_deliveries(5);
//! let consumer = Consumer::new(config)?;
//! let stats = consumer
//!     .run(
//!         |entry: Entry| async move {
//!             println!("{} {}", entry.id, entry.payload);
//!             Ok::<(), std::io::Error>(())
//!         },
//!         std::future::pending::<()>(), // your shutdown signal
//!     )
//!     .await;
//! println!("handled {}", stats.handled);
//! # Ok(()) }
//! ```

pub mod config;
pub mod consumer;
pub mod entry;
mod handling;
#[cfg(feature = "inbox")]
pub mod inbox;
pub mod lanes;
#[cfg(feature = "inbox")]
pub mod prepared;
pub mod redis_conn;
pub mod retry;
mod stream;

pub use config::{ConfigError, ConsumerConfig};
pub use consumer::{Consumer, ConsumerError, RunStats};
pub use entry::{Entry, EntryError};
pub use redis_conn::{ConnectError, RedisConn};
