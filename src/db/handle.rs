//! [`Db`]: the only way to a Postgres connection of the relay and the admin server. It holds a
//! pool together with the [`Session`] its connections were opened in, and hands a connection
//! out only inside [`Db::unit`] or a [`DbConn`]'s `unit` and `transaction`, which apply the
//! session's rules (behind a transaction pooler, every statement inside a transaction that
//! sets the lease as its timeouts). Forgetting the mode therefore does not compile.

use diesel_async::SimpleAsyncConnection;

use super::pool::{ConnectLog, Pool, PooledConn};
use super::pooler::{self, Session, Work};
use super::DbError;

/// A pool and the session mode of its connections. Cheap to clone.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    session: Session,
    connect_log: ConnectLog,
}

/// A connection checked out of a [`Db`], for several units or transactions in a row (the claim
/// cycle's two attempts); returned to the pool when dropped.
pub struct DbConn<'a> {
    conn: PooledConn<'a>,
    session: Session,
}

impl Db {
    pub(super) fn new(pool: Pool, session: Session, connect_log: ConnectLog) -> Db {
        Db {
            pool,
            session,
            connect_log,
        }
    }

    /// Where its connection failures are logged (shared with the process's other pools).
    pub fn connect_log(&self) -> &ConnectLog {
        &self.connect_log
    }

    /// The session its connections are in.
    pub fn session(&self) -> Session {
        self.session
    }

    /// A connection from the pool, or the outage.
    pub async fn conn(&self) -> Result<DbConn<'_>, DbError> {
        Ok(DbConn {
            conn: self.pool.get().await?,
            session: self.session,
        })
    }

    /// Runs `f` with a connection from the pool as one unit of work that is not a transaction
    /// of its own (an admin page, a heartbeat): see [`DbConn::unit`].
    pub async fn unit<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: Work<R, E>,
        E: From<DbError> + Send,
        R: Send,
    {
        let mut conn = self.conn().await?;
        conn.unit(f).await
    }

    /// `SELECT 1` in one round trip of the simple protocol: no prepared statement and no
    /// transaction are needed for it, behind a pooler or not.
    pub async fn ping(&self) -> Result<(), DbError> {
        let mut conn = self.pool.get().await?;
        conn.batch_execute("SELECT 1").await?;
        Ok(())
    }
}

impl DbConn<'_> {
    /// Runs `f` as it is on a connection of its own; behind a transaction pooler, in one
    /// transaction (see `pooler`). Inside a transaction already, `f` runs in it.
    pub async fn unit<R, E, F>(&mut self, f: F) -> Result<R, E>
    where
        F: Work<R, E>,
        E: From<DbError> + Send,
        R: Send,
    {
        pooler::unit(&mut self.conn, self.session, f).await
    }

    /// Runs `f` in a transaction that sets the lease as its own timeouts, committed when `f`
    /// succeeds, rolled back when it fails: the claim cycle's transaction.
    pub async fn transaction<R, E, F>(&mut self, f: F) -> Result<R, E>
    where
        F: Work<R, E>,
        E: From<diesel::result::Error> + Send,
        R: Send,
    {
        pooler::transaction(&mut self.conn, self.session, f).await
    }
}
