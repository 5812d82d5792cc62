//! The bb8 pools of diesel-async connections, and the session set-up every connection gets.
//!
//! A tokio-postgres connection's driver task (the one that reads and writes its socket) lives
//! on the runtime that opened it, so each pool says where its drivers run ([`Drivers`]).
//! actix-web runs one runtime per worker, and a worker that stops first would close
//! connections that another worker still uses (its requests fail with "connection closed"
//! at shutdown): the admin's pool drives its connections on one dedicated thread. The relay's
//! actors all run on the system arbiter, which outlives them: their pool drives its
//! connections right there, which spares every statement two hand-offs between threads.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use diesel::ConnectionError;
use diesel_async::pooled_connection::bb8::PooledConnection;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use futures::FutureExt;

use super::pooler::Session;
use super::Db;

/// A bb8 pool of diesel-async connections; reached only through [`Db`].
pub type Pool = bb8::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;
/// A connection borrowed from the pool.
pub type PooledConn<'a> = PooledConnection<'a, AsyncPgConnection>;

fn driver_runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("pg-drivers".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match rt {
                    Ok(rt) => {
                        let _ = tx.send(Some(rt.handle().clone()));
                        rt.block_on(futures::future::pending::<()>());
                    }
                    Err(_) => {
                        let _ = tx.send(None);
                    }
                }
            })
            .ok()
            .and_then(|_| rx.recv().ok().flatten())
            .unwrap_or_else(|| {
                // Without a thread of its own, fall back to the caller's runtime; the shutdown
                // race described above comes back, but the relay still works.
                tokio::runtime::Handle::current()
            })
    })
}

/// Where a pool's connection drivers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drivers {
    /// On one dedicated thread, for a pool used from several runtimes (the admin server's).
    Dedicated,
    /// On the runtime that opens the connection, for a pool used from one runtime that
    /// outlives every user of it (the relay's, on the actix system arbiter): it spares every
    /// statement two hand-offs between threads.
    Caller,
}

/// Connections of `database.pool_size` that go to the admin server's own pool; the relay's
/// pool gets the rest, so neither can starve the other.
pub const ADMIN_CONNECTIONS: u32 = 2;

/// Opens one connection in `session`'s mode, its driver where `drivers` says, with the
/// session's set-up applied.
pub async fn establish(
    url: &str,
    session: Session,
    drivers: Drivers,
    log: &ConnectLog,
) -> Result<AsyncPgConnection, ConnectionError> {
    let url = url.to_string();
    let setup = session.setup_sql();
    let open = async move {
        let mut conn = super::tls::connect_in(&url, session.mode).await?;
        conn.batch_execute(&setup)
            .await
            .map_err(ConnectionError::CouldntSetupConfiguration)?;
        Ok::<_, ConnectionError>(conn)
    };
    let opened = match drivers {
        Drivers::Caller => open.await,
        Drivers::Dedicated => driver_runtime()
            .spawn(open)
            .await
            .map_err(|e| ConnectionError::BadConnection(format!("connection task failed: {e}")))?,
    };
    if let Err(error) = &opened {
        log.report(error);
    }
    opened
}

/// Why connecting to Postgres failed (a refused certificate, a wrong password), logged once
/// per reason and minute: the pools retry without end and their own error only says they
/// timed out. One log is shared by every pool and the listener of a process, so a reason is
/// said once however many of them meet it.
#[derive(Debug, Clone, Default)]
pub struct ConnectLog(Arc<Mutex<Option<(String, Instant)>>>);

impl ConnectLog {
    fn report(&self, error: &ConnectionError) {
        let reason = error.to_string();
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let repeat = last
            .as_ref()
            .is_some_and(|(said, at)| *said == reason && at.elapsed() < Duration::from_secs(60));
        if !repeat {
            tracing::warn!("cannot connect to postgres: {reason}");
            *last = Some((reason, Instant::now()));
        }
    }
}

/// Builds the pool without connecting, as the [`Db`] handle of its `session`: the relay
/// starts (and reports not-ready) while Postgres is away, and connects once it is back.
pub fn build(url: &str, size: u32, session: Session, drivers: Drivers, log: &ConnectLog) -> Db {
    let connect_log = log.clone();
    let mut config = ManagerConfig::<AsyncPgConnection>::default();
    config.recycling_method = RecyclingMethod::Fast;
    config.custom_setup = Box::new(move |url| {
        let url = url.to_string();
        let log = connect_log.clone();
        async move { establish(&url, session, drivers, &log).await }.boxed()
    });
    let manager = AsyncDieselConnectionManager::new_with_config(url, config);
    let pool = bb8::Pool::builder()
        .max_size(size)
        .connection_timeout(Duration::from_secs(3))
        .test_on_check_out(false)
        .build_unchecked(manager);
    Db::new(pool, session, log.clone())
}
