//! All SQL of the `outbox` table, one module per concern. The relay's: claiming, marking,
//! retrying and dead-lettering (`cycle`, the statements of a claim cycle), retention, the
//! backlog (`backlog`), and republishing a range (`republish`). The admin's: the event lists and timelines
//! ([`browse`]), the counts behind `/api/v1/stats` ([`stats`]), steering dead letters
//! ([`dead`]) and the keys they park ([`parked`]). The producers': the insert (`insert`, which `producer` checks events for).
//! Other tables (`outbox_topics`, audit, ...) have their own modules under `db`.
//!
//! The claim happens in two statements inside the relay's publish transaction:
//! [`claim_heads`] locks the oldest claimable events (each the first pending event of its
//! key, or unkeyed), skipping rows other replicas hold; [`claim_runs`] then locks the events
//! that follow each claimed key head, so a hot key moves a whole run per round trip.

mod backlog;
pub mod browse;
mod cycle;
pub mod dead;
mod insert;
pub mod parked;
pub mod republish;
mod retention;
pub mod stats;

use backlog::oldest_due_age_sql;
pub use backlog::{backlog, next_due_in_ms, Backlog};
pub use cycle::*;
pub use insert::{insert_returning_ids, NewRow};
use parked::PARKED_SQL;
pub use retention::delete_published_before;
