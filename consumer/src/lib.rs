//! outbox-consumer: reads the Redis Streams that outbox-relay writes (one stream per topic,
//! `<stream_prefix><topic>`) as a member of a consumer group.
//!
//! You write a [`Handler`] (a closure from [`Entry`] to a future of `Result`), build a
//! [`Consumer`] from a [`ConsumerConfig`], and [`Consumer::run`] it. The handler's
//! [`HandlerError`] says what becomes of a failed entry: retried later (what `?` on any error
//! gives), dead-lettered now, or waited out as an outage without spending a delivery. Wrappers
//! implement the same traits: [`Batches`] hands whole batches to a [`BatchHandler`], and
//! `inbox::Inbox` (feature `inbox`, on by default) commits each effect with an inbox row in
//! one Postgres transaction, so a redelivered event takes effect once. Your own middleware is
//! a [`Layer`]: it wraps a handler in another (as tower's and apalis's layers do), and so
//! are the library's own panic catching and processing spans.
//!
//! The map of the crate:
//!
//! | module | what it is for |
//! |---|---|
//! | `config` | [`ConsumerConfig`], every setting with its default, validated |
//! | `handler` | [`Handler`], [`BatchHandler`], [`Batches`], [`HandlerError`]: the user's side, a leaf |
//! | `consumer` | [`Consumer`]: the loop (own pending entries first, then new ones), acks, claims |
//! | `handling` | [`Processing`], what `run` takes; one batch: lanes by partition key (keys concurrently, one key in order), checks before a handler, whole batches, retry or dead stream |
//! | `layer` | [`Layer`]: middleware around a handler; the library's own (panic catching, spans) are layers too |
//! | `fleet` | dividing a partitioned topic's partitions among the group: membership, leases (the bookkeeping a pure function, `fleet::leases`), epochs |
//! | `source` | the `Source` seam under the loop: read new, own pending, claim abandoned, take, keep, acknowledge, check ownership; `Group` on plain streams (plain commands), `Fenced` with the fleet's leases |
//! | `stream` | the entries as held (types, grouping per stream and slot), setting up the streams and the group, read replies, dead letters |
//! | `park` | parked keys ([`ConsumerConfig::park_keys`]): a batch's parked keys held, a dead entry parking its key, released keys drained in order |
//! | `spans` | each handler call in a processing span (the `Traced` layer); with feature `otel`, a child of the entry's publish span |
//! | `inbox` (feature `inbox`) | exactly-once effects: the effect and the `outbox_inbox` row in one transaction; every statement in `inbox::sql` (public with the `testing` feature only) |
//!
//! The entry format, key names and the Redis connection are `outbox-core`'s, shared with the
//! relay.
//!
//! On a partitioned topic (`<stream_prefix><topic>:<p>`, the count in
//! `<stream_prefix>partitions`) the consumers of one group divide the partitions among
//! themselves, so each key's events are handled by one consumer at a time, in order, across the
//! fleet; each entry carries its partition's [`Lease`], and the inbox refuses the commit of a
//! consumer whose partition has passed to a newer owner (docs/consumers.md, "A fleet on a
//! partitioned topic").
//!
//! Delivery is at least once: an entry is acknowledged only after its handler returned `Ok`,
//! so a crash in between redelivers it. Make effects idempotent, or use the inbox.
//!
//! ```no_run
//! use outbox_consumer::{Consumer, ConsumerConfig, Entry, HandlerError};
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     order_id: u64,
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = ConsumerConfig::new("redis://127.0.0.1:6379", "order.created", "billing")
//!     .consumer("billing-0")
//!     .max_deliveries(5);
//! let consumer = Consumer::new(config)?;
//! let stats = consumer
//!     .run(
//!         |entry: Entry| async move {
//!             // A payload that does not parse never will: dead-letter it at once.
//!             let order: Order = entry.payload_as().map_err(HandlerError::dead_letter)?;
//!             println!("{} order {}", entry.id, order.order_id);
//!             Ok::<(), HandlerError>(())
//!         },
//!         std::future::pending::<()>(), // your shutdown signal
//!     )
//!     .await;
//! println!("handled {}", stats.handled);
//! # Ok(()) }
//! ```

mod config;
mod consumer;
mod fleet;
mod handler;
mod handling;
#[cfg(feature = "inbox")]
pub mod inbox;
mod layer;
mod park;
mod source;
mod spans;
mod stream;

pub use config::{ConfigError, ConsumerConfig};
pub use consumer::{Consumer, ConsumerError, RunStats};
pub use handler::{BatchHandler, Batches, ErrorKind, Handler, HandlerError};
pub use handling::Processing;
pub use layer::{layer_fn, Layer, LayerFn};
pub use outbox_core::{ConnectError, Entry, EntryError, Lease};
