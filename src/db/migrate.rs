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
    /// `database.runtime_role` could not be granted its rights.
    #[error("cannot grant database.runtime_role {role} its rights: {error}")]
    Grant {
        /// The role.
        role: String,
        /// Postgres' answer.
        error: diesel::result::Error,
    },
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

/// What a migration does beside applying the pending migrations.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Make the adopted tables match these ([`super::adopted::sync`]).
    pub tables: Option<Vec<TableSpec>>,
    /// Release these adopted tables (`migrate --release`).
    pub release: Vec<String>,
    /// Grant this role the relay's runtime rights ([`super::grants`]).
    pub runtime_role: Option<String>,
}

/// Applies pending migrations and, with `tables`, makes the adopted tables match them
/// ([`super::adopted::sync`]), all in one transaction.
pub async fn prepare(url: &str, tables: Option<&[TableSpec]>) -> Result<Migrated, MigrateError> {
    let plan = Plan {
        tables: tables.map(<[TableSpec]>::to_vec),
        ..Plan::default()
    };
    prepare_plan(url, &plan).await
}

/// Applies pending migrations and what `plan` adds, all in one transaction.
pub async fn prepare_plan(url: &str, plan: &Plan) -> Result<Migrated, MigrateError> {
    let (url, plan) = (url.to_string(), plan.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_blocking(&url, &plan));
    });
    rx.await.map_err(|_| MigrateError::Thread)?
}

/// How long one try to connect may take: a host that drops packets must not use up the
/// whole wait in one try.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest pause between two tries of [`prepare_waiting`].
const MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(5);

/// [`prepare_plan`], trying again for up to `wait` while Postgres cannot be reached (a server
/// starting, a failover under way, a Service without endpoints yet), with one log line per
/// failed try: an init container then waits for its database instead of crash-looping. Any
/// other failure ends it at once.
pub async fn prepare_waiting(
    url: &str,
    plan: &Plan,
    wait: std::time::Duration,
) -> Result<Migrated, MigrateError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = std::time::Duration::from_millis(500);
    let mut tries = 0u32;
    loop {
        tries += 1;
        let error = match prepare_plan(url, plan).await {
            Err(MigrateError::Connect(e)) => e,
            done => return done,
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left < pause {
            return Err(MigrateError::Connect(error));
        }
        tracing::warn!(
            tries,
            retry_in_ms = pause.as_millis() as u64,
            waits_for_s = left.as_secs(),
            "postgres cannot be reached yet, migrate tries again (migrate --wait): {error}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

fn run_blocking(url: &str, plan: &Plan) -> Result<Migrated, MigrateError> {
    // The connection's task runs on this runtime's worker while the synchronous harness
    // waits for each statement.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|_| MigrateError::Thread)?;
    let conn = runtime
        .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, super::tls::connect(url)).await })
        .map_err(|_| {
            diesel::ConnectionError::BadConnection(format!(
                "no answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))
        })??;
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
        let tables = match (&plan.tables, plan.release.is_empty()) {
            (None, true) => Synced::default(),
            (tables, _) => {
                super::adopted::sync(c, tables.as_deref().unwrap_or(&[]), &plan.release)?
            }
        };
        if let Some(role) = &plan.runtime_role {
            super::grants::grant(c, role).map_err(|error| MigrateError::Grant {
                role: role.clone(),
                error,
            })?;
        }
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
