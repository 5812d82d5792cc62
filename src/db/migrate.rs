//! The embedded migrations, applied in one transaction under a transaction-scoped advisory
//! lock, so that replicas may race, also through a pooler in transaction mode.

use diesel::connection::{CacheSize, SimpleConnection};
use diesel::Connection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::AsyncPgConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use super::adopted::Synced;
use crate::adopt::TableSpec;

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
    Lock(diesel::result::Error),
    /// The migrations' transaction could not begin or commit.
    #[error("migration transaction failed: {0}")]
    Transaction(#[from] diesel::result::Error),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migration(String),
    /// An adopted table could not be prepared or released.
    #[error(transparent)]
    Adopt(#[from] super::adopted::AdoptError),
    /// The migration thread died.
    #[error("migration thread failed")]
    Thread,
}

/// Applies pending migrations and returns how many ran. Runs on its own thread: diesel's
/// migration harness is synchronous and `AsyncMigrationHarness` panics on actix's
/// single-threaded runtime.
pub async fn run_pending(url: &str) -> Result<usize, MigrateError> {
    Ok(prepare(url, None).await?.applied)
}

/// What `migrate` did.
#[derive(Debug, Default)]
pub struct Migrated {
    /// Migrations applied.
    pub applied: usize,
    /// Adopted tables prepared and released.
    pub tables: Synced,
}

/// Applies pending migrations and, with `tables`, makes the adopted tables match them
/// ([`super::adopted::sync`]), all in one transaction.
pub async fn prepare(url: &str, tables: Option<&[TableSpec]>) -> Result<Migrated, MigrateError> {
    let url = url.to_string();
    let tables = tables.map(<[TableSpec]>::to_vec);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_blocking(&url, tables.as_deref()));
    });
    rx.await.map_err(|_| MigrateError::Thread)?
}

fn run_blocking(url: &str, tables: Option<&[TableSpec]>) -> Result<Migrated, MigrateError> {
    // The connection's task runs on this runtime's worker while the synchronous harness
    // waits for each statement.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|_| MigrateError::Thread)?;
    let conn = runtime.block_on(super::tls::connect(url))?;
    let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::from(conn);
    // Nothing may outlive the transaction on the server connection (see `pooler`).
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    // One transaction: a second replica waits at the lock, then finds nothing pending; the
    // lock ends with the transaction, also behind a pooler in transaction mode, where a
    // session lock would stay on whichever server connection took it. Each migration is a
    // savepoint inside it; a failing one leaves the database as it was.
    let applied = conn.transaction::<_, MigrateError, _>(|c| {
        c.batch_execute(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
            .map_err(MigrateError::Lock)?;
        let applied = c
            .run_pending_migrations(MIGRATIONS)
            .map(|applied| applied.len())
            .map_err(|e| MigrateError::Migration(e.to_string()))?;
        let tables = match tables {
            Some(tables) => super::adopted::sync(c, tables)?,
            None => Synced::default(),
        };
        Ok(Migrated { applied, tables })
    });
    drop(conn);
    drop(runtime);
    applied
}

#[cfg(test)]
mod tests {
    /// The consumer library creates its inbox tables from its own copy of the SQL (it is
    /// packaged alone); `migrate` must create the very same tables.
    #[test]
    fn the_inbox_migrations_are_the_consumer_librarys_sql() {
        assert_eq!(
            include_str!("../../migrations/2026-12-07-000001_inbox/up.sql"),
            include_str!("../../consumer/sql/inbox.sql")
        );
        assert_eq!(
            include_str!("../../migrations/2026-12-09-000001_inbox_fences/up.sql"),
            include_str!("../../consumer/sql/inbox_fences.sql")
        );
    }
}
