//! Postgres: the pool, the embedded migrations, and all SQL, one module per table.
//!
//! Raw SQL lives only here. Each function is named for what its statement does, so the relay
//! reads as `claim_heads`, `mark_published`, `schedule_retry`, `delete_published_before`.

pub mod adopted;
pub mod audit;
pub mod grants;
pub mod handle;
pub mod idempotency;
pub mod migrate;
pub mod outbox;
pub mod pool;
pub mod pooler;
pub mod replicas;
pub mod schema;
pub mod standbys;
pub mod stream_marks;
pub mod tls;
pub mod topics;
pub mod wake;

pub use handle::{Db, DbConn};
pub use pooler::{Session, SessionMode};

/// A failure talking to Postgres. Every variant is an outage from the events' point of view:
/// none of them is caused by an event's content, so none consumes an attempt.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// A statement failed (including a connection that dropped mid-statement).
    #[error("postgres query failed: {0}")]
    Query(#[from] diesel::result::Error),
    /// No connection could be had from the pool in time.
    #[error("postgres unavailable: {0}")]
    Pool(String),
    /// A dedicated connection (LISTEN, migrations) could not be opened.
    #[error("postgres connection failed: {0}")]
    Connect(#[from] diesel::ConnectionError),
    /// The standbys did not confirm a batch in time (`database.wait_standbys`).
    #[error("{0}")]
    Standbys(String),
}

impl From<diesel_async::pooled_connection::bb8::RunError> for DbError {
    fn from(e: diesel_async::pooled_connection::bb8::RunError) -> Self {
        DbError::Pool(e.to_string())
    }
}
