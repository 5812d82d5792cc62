//! The end-to-end tests, one binary: the real `outbox-relay` binary (or the library's claim
//! and publish functions) against a real Postgres (127.0.0.1:5432) and Redis (127.0.0.1:6379),
//! each test on a database of its own and a Redis key prefix (or a redis-server) of its own.
//! `cargo test --test e2e MODULE::` runs one area, e.g. `cargo test --test e2e ui::`.
//!
//! | module | covers |
//! |---|---|
//! | [`adopt`] | adopted tables: a Debezium-layout table published row by row (insert-then-delete included, rollbacks and older rows not) and shown by the admin, a bigint id and a text payload, bad inserts refused naming the column, drift and release, three relays SIGKILLed in turn, a producer role with rights on its own table only, a team's own table (schema-qualified, `created_at` and headers mapped) on a partitioned topic, upserts (only inserted rows), a replay of adopted events after the table emptied, a dead row parking its key (`park_on_dead`) until discarded, an upgrade's `migrate` making the copy function again |
//! | [`cloudevents`] | the CloudEvents envelope: entries of `id` + `cloudevent` read by the CloudEvents SDK attribute by attribute, by `tail` and by the consumer library (typed payloads, the attributes on `Entry`, a partitioned topic); the inbox example SIGKILLed, each event once; a traced event's span chain |
//! | [`delivery`] | exactly once with intact fields, rollbacks, delete mode, no prepared statements, `available_at`, maxlen |
//! | [`durability`] | `redis.wait_replicas` and `redis.wait_fsync`: nothing marked published before Redis confirmed as asked; a Redis that cannot confirm leaves the relay not ready, sending nothing |
//! | [`ordering`] | per-key order with three relays and two producers; a hot key moves in whole runs |
//! | [`claim`] | concurrent claim transactions, claim slots, the head/run snapshot race, the byte budget |
//! | [`cluster`] | Redis Cluster: three masters, exactly once and key order, a master killed, a slot migrated, the Streams page |
//! | [`partitions`] | partitioned topics: each key in its Kafka partition's stream, in order, once; declared groups on every partition; a relay with another count refused; `repartition` |
//! | [`big_events`] | megabyte events drain in bounded memory |
//! | [`inbox_batches`] | the library's batch inbox: one transaction per batch, each effect once, a failing batch dead-lettered |
//! | [`failover`] | Postgres failover: a multi-host `DATABASE_URL` whose first host is down; `migrate`, `run` and its LISTEN connection use the next; the primary killed and its streaming standby promoted, the relay follows, every event once, no attempt spent; `migrate` with a standby first; `database.wait_standbys = 1` holds back what the standby has not flushed (its link held), then publishes it, no attempt spent; a failover while the standby lags: without the setting 10 phantom events (in the stream, not on the new primary), with it none, each event once; a role without `pg_monitor` is not ready, one line naming the grant |
//! | [`groups`] | declared consumer groups made before the first publish, their metrics, `redis.trim_acked` |
//! | [`dedup`] | the publish script's dedup windows and the retired sets' freeing |
//! | [`wake`] | producers' NOTIFY quieted while a relay drains, and back after |
//! | [`consumer`] | the consumer library and `consumer/examples/inbox_consumer`, by concern: example processes fed by a relay (SIGKILLed, each event once; poison after `--max-deliveries`), claims after `claim_idle`, per-key order, batches, failures, the inbox, connections (a Redis restart, mutual TLS), a group's parked keys (`--park-keys`: a poison entry parks its key through a SIGKILL; redrive, discard, the admin API) |
//! | [`fleet`] | a group's fleet on a partitioned topic, by concern: balance after joins and leaves, key order through kills, freezes and scaling, the inbox's fence, every kind of handler (one Redis, a cluster), a repartition; a parked key held through its partition owner's SIGKILL, then released in order |
//! | [`traces`] | OTLP traces: the producer's trace through the publish span to the consumer's span; the Rust producer API's trace context |
//! | [`crash`] | SIGKILL of relays in a loop: nothing lost, nothing doubled |
//! | [`outage`] | a Redis outage (own redis-server): no attempt burnt, recovery |
//! | [`loss`] | entries Redis lost (an older snapshot, a failover without waiting) published again, once, in order |
//! | [`memory`] | memory back-pressure: above `redis.max_memory_ratio` publishing is held, then resumes |
//! | [`sentinel`] | Redis behind Sentinel: the relay, an inbox consumer and `tail` follow a failover; passwords |
//! | [`pg_outage`] | a Postgres outage (own server): the process survives, recovery |
//! | [`parking`] | `park_on_dead`: a dead event holds its key's later events (no attempt spent) while other keys and a topic without the setting flow; the parked-keys API, `outbox_parked_events` and the oldest-pending age; a discard, and a retry that publishes, release the key in order; partitions and two relays |
//! | [`poison`] | failing events retried then dead while others flow; a key waits for its head |
//! | [`replay`] | a topic's published events of a time range sent again, in order, through the API, the CLI and the UI, audited; a bad time refused |
//! | [`lease`] | a hung replica's claim taken over; claim slots; poll-only; NOTIFY off |
//! | [`pgbouncer`] | through PgBouncer in transaction mode: delivery, order, SIGKILL, lease, retention, pause, `migrate`; no session state left on its server connections |
//! | [`retention`] | retention deletes old published rows only; paused topics |
//! | [`shutdown`] | SIGTERM exits 0 and another replica takes over |
//! | [`supervision`] | a panicking actor restarted, a dead one ends the process (70), a stalled loop fails `/healthz`, `/readyz` during an outage, the first scrape |
//! | [`tls`] | Postgres `verify-full`/`verify-ca` and `rediss://` with a test CA; a wrong host name or CA refused; Redis mutual TLS |
//! | [`tail`] | `outbox-relay tail`: JSON lines, `--from`, `--count`, `--group` acknowledging |
//! | [`cli`] | bad settings exit 2, `--help`, concurrent `migrate` |
//! | [`demo`] | `outbox-relay demo` end to end |
//! | [`api`] | the admin JSON API: auth, validation, pagination, idempotency, steering, audit |
//! | [`ui`] | the web UI in headless Chromium and over plain HTTP |
//!
//! [`support`] holds the shared helpers, by concern: databases, Redis, relay processes,
//! test traffic, HTTP, and [`support::eventually`], the one way to wait. Helpers fail loudly on
//! errors, and a test checks that something did *not* happen only after a sign that it had its
//! chance (a claim cycle, a log line, a later event or span).

mod adopt;
pub mod api;
mod big_events;
mod claim;
mod cli;
mod cloudevents;
mod cluster;
mod consumer;
mod crash;
mod dedup;
mod delivery;
mod demo;
mod durability;
mod failover;
mod fleet;
mod groups;
mod inbox_batches;
mod lease;
mod loss;
mod memory;
mod ordering;
mod outage;
mod parking;
mod partitions;
mod pg_outage;
mod pgbouncer;
mod poison;
mod replay;
mod retention;
mod sentinel;
mod shutdown;
mod supervision;
pub mod support;
mod tail;
mod tls;
mod traces;
pub mod ui;
mod wake;
