//! The embedded migrations, applied under an advisory lock so that replicas may race.

use diesel::connection::SimpleConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::AsyncPgConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

/// The `migrations/` folder, compiled into the binary.
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Advisory lock key held while migrating ("outbox-m" in ASCII).
const MIGRATION_LOCK: i64 = 0x6f75_7462_6f78_2d6d;

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Could not connect.
    #[error("cannot connect to postgres: {0}")]
    Connect(#[from] diesel::ConnectionError),
    /// The lock statement failed.
    #[error("cannot take the migration lock: {0}")]
    Lock(#[from] diesel::result::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migration(String),
    /// The migration thread died.
    #[error("migration thread failed")]
    Thread,
}

/// Applies pending migrations and returns how many ran. Runs on its own thread: diesel's
/// migration harness is synchronous and `AsyncMigrationHarness` panics on actix's
/// single-threaded runtime.
pub async fn run_pending(url: &str) -> Result<usize, MigrateError> {
    let url = url.to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_blocking(&url));
    });
    rx.await.map_err(|_| MigrateError::Thread)?
}

fn run_blocking(url: &str) -> Result<usize, MigrateError> {
    // The connection (plain or TLS, see `tls`) is driven by a runtime of its own, and the
    // wrapper blocks on that runtime's handle for each synchronous call of the harness.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|_| MigrateError::Thread)?;
    let conn = runtime.block_on(super::tls::connect(url))?;
    let mut conn = {
        let _entered = runtime.enter();
        AsyncConnectionWrapper::<AsyncPgConnection>::from(conn)
    };
    // Session-level lock: a second replica waits here, then finds nothing pending.
    conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))?;
    let result = conn
        .run_pending_migrations(MIGRATIONS)
        .map(|applied| applied.len())
        .map_err(|e| MigrateError::Migration(e.to_string()));
    let unlock = conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"));
    let applied = result?;
    unlock?;
    Ok(applied)
}
