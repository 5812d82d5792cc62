//! outbox-core: what the relay (`outbox-relay`) and the consumer library (`outbox-consumer`)
//! share, written once so that the two sides cannot disagree: the stream entry's format, the
//! Redis key names, the topic rule, how Redis is reached (one server or a cluster, TLS files
//! checked), backoff, and raw SQL that a connection keeps prepared.
//!
//! The map of the crate:
//!
//! | module | what it is for |
//! |---|---|
//! | [`cloudevent`] | the CloudEvents envelope: an event written as CloudEvents 1.0 JSON, and read back |
//! | [`entry`] | the stream entry's fields: [`Entry`] parsed from them |
//! | [`timestamp`] | `created_at`'s text (and a CloudEvent's `time`) |
//! | [`entry_id`] | a stream entry id, `<ms>-<seq>`, parsed, printed and ordered as Redis does |
//! | [`keys`] | `<prefix><topic>`, `<prefix><topic>:<p>`, `<prefix><topic>:dead`, `<prefix>partitions`, a fleet's `<prefix><topic>:{<group>}:...` |
//! | [`topic`] | the topic rule of the `outbox` table's CHECK constraint |
//! | [`redis_conn`] | [`RedisConn`]: one server or a Redis Cluster, lazy, TLS files applied |
//! | [`groups`] | creating a consumer group that may already exist |
//! | [`pem`] | PEM files named by TLS settings, read and checked once |
//! | [`backoff`] | retry and outage delays with jitter; rate-limited error logs |
//! | [`panic`] | a caught panic's message |
//! | [`parked`] | a consumer group's parked keys in Redis: parked, held, released, drained (contract section 13) |
//! | [`partition`] | Kafka's murmur2 partitioner: which partition a key goes to |
//! | [`host`] | this host's name |
//! | [`sentinel`] | Redis behind Sentinel: the master they name, followed across failovers |
//! | [`trace`] | W3C trace context across an event's hops: producer, publish, consumer |
//! | `prepared` (feature `postgres`) | raw SQL a connection keeps prepared |

pub mod backoff;
pub mod cloudevent;
pub mod entry;
pub mod entry_id;
pub mod groups;
pub mod host;
pub mod keys;
pub mod panic;
pub mod parked;
pub mod partition;
pub mod pem;
#[cfg(feature = "postgres")]
pub mod prepared;
pub mod redis_conn;
pub mod sentinel;
pub mod timestamp;
pub mod topic;
pub mod trace;

pub use entry::{Entry, EntryError, Lease};
pub use redis_conn::{ConnectError, RedisConn};
