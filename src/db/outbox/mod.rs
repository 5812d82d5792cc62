//! The relay's SQL of the `outbox` table: claiming, marking, retrying, dead-lettering,
//! retention, stats. The admin's reads are in `events`, its dead-letter steering in `dead`.
//!
//! The claim happens in two statements inside the relay's publish transaction:
//! [`claim_heads`] locks the oldest claimable events (each the first pending event of its
//! key, or unkeyed), skipping rows other replicas hold; [`claim_runs`] then locks the events
//! that follow each claimed key head, so a hot key moves a whole run per round trip.

mod backlog;
mod claim;
pub mod republish;
mod retention;
mod settle;

pub(crate) use backlog::OLDEST_DUE_AGE_SQL;
pub use backlog::{backlog, next_due_in_ms, Backlog};
pub use claim::*;
pub use retention::delete_published_before;
pub use settle::*;
