//! What a connection may rely on between two transactions: behind a pooler in transaction mode
//! (PgBouncer `pool_mode = transaction`), nothing. Each transaction may run on another server
//! connection, and whatever a transaction leaves in its server session (a `SET`, a prepared
//! statement, a session lock) stays there for the next client of that server connection.
//!
//! A [`Session`] says which mode the connections are in, and travels with them: the pool's
//! connection set-up and the [`Db`](super::Db) handle, the only way to a connection, carry it,
//! so no statement can forget it. [`SessionMode::TransactionPooled`] (`database.pooler =
//! "transaction"`, or the older `database.prepared_statements = false`):
//! - No session settings at connect (`db::pool`): a `SET statement_timeout` sent once would
//!   bind one server connection, for every client of the pooler, and be missing on the others.
//!   The limits are set per transaction instead ([`Session::begin_sql`], which every
//!   [`transaction`] starts with, pooler or not).
//! - No statement cache, and every statement inside a transaction ([`unit`]). diesel-async sends
//!   each statement as a named Parse, then Bind/Execute, then Close, each ended by a Sync; out of
//!   a transaction the pooler may hand each part to another server connection (`prepared
//!   statement "s12" does not exist`), and a statement left behind on one breaks another
//!   client's statement of the same name (`... already exists`).
//!
//! [`connect`] wraps diesel-async's own set-up statements (`SET TIME ZONE`, `SET
//! CLIENT_ENCODING`) in a transaction for the same reason, for every connection.

use std::future::Future;
use std::time::Duration;

use diesel::connection::CacheSize;
use diesel::ConnectionError;
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncPgConnection, SimpleAsyncConnection,
    TransactionManager,
};
use futures::FutureExt;

use super::DbError;

/// What sits between the relay and Postgres, and so what a connection may keep between two
/// transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionMode {
    /// Each connection is a server session of its own: session settings and prepared
    /// statements last as long as the connection (`database.pooler = "none"`).
    #[default]
    Direct,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): each transaction may
    /// run on another server connection, so nothing is kept between transactions
    /// (`database.pooler = "transaction"`).
    TransactionPooled,
}

/// The mode of a pool's connections and the limits each transaction of the relay sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// What connections may keep between transactions.
    pub mode: SessionMode,
    /// `relay.lease`: Postgres ends a transaction idle for longer (releasing its row locks), and
    /// a statement running longer.
    pub lease: Duration,
}

impl Session {
    /// Whether nothing may be kept in a server session between transactions.
    pub fn transaction_pooled(&self) -> bool {
        self.mode == SessionMode::TransactionPooled
    }

    fn lease_ms(&self) -> u128 {
        self.lease.as_millis().max(1000)
    }

    /// What a new connection runs once. In a session of its own: the lease as its timeouts and
    /// TCP keepalives that let Postgres notice a relay host that vanished (power loss,
    /// partition) within about a third of the lease, where the kernel default would take hours.
    /// Behind a transaction pooler a session setting would bind one server connection for all
    /// its clients: each transaction sets the limits itself ([`Session::begin_sql`]).
    pub fn setup_sql(&self) -> String {
        if self.transaction_pooled() {
            return "SET application_name = 'outbox-relay'".into();
        }
        let lease_ms = self.lease_ms();
        let idle = (self.lease.as_secs() / 3).max(1);
        format!(
            "SET idle_in_transaction_session_timeout = {lease_ms}; \
             SET statement_timeout = {lease_ms}; \
             SET tcp_keepalives_idle = {idle}; \
             SET tcp_keepalives_interval = {idle}; \
             SET tcp_keepalives_count = 2; \
             SET application_name = 'outbox-relay'"
        )
    }

    /// The statement that opens a transaction of the relay, in one round trip: `BEGIN`, and
    /// the lease as its `statement_timeout` and `idle_in_transaction_session_timeout` (`SET
    /// LOCAL`: they end with the transaction, and never bind the server connection's next
    /// client). Postgres ends a transaction idle for longer, and its locks go: a hung relay's
    /// claim is released after the lease also when no session setting reaches the server
    /// connection it runs on.
    pub fn begin_sql(&self) -> String {
        let ms = self.lease_ms();
        format!(
            "BEGIN; SET LOCAL statement_timeout = {ms}; \
             SET LOCAL idle_in_transaction_session_timeout = {ms}"
        )
    }
}

/// An async closure over a connection whose future is `Send`, as diesel-async's `transaction`
/// takes it (that crate's own trait for this is private).
pub trait ConnFn<T, R>: AsyncFnOnce(T) -> R + FnOnce(T) -> <Self as ConnFn<T, R>>::Fut {
    /// The future the closure returns.
    type Fut: Future<Output = R>;
}

impl<F, T, Fut, R> ConnFn<T, R> for F
where
    F: AsyncFnOnce(T) -> R + FnOnce(T) -> Fut,
    Fut: Future<Output = R>,
{
    type Fut = Fut;
}

/// Work on a connection, as [`Db::unit`](super::Db::unit) and the transactions take it: an
/// async closure over `&mut AsyncPgConnection` whose future is `Send`.
pub trait Work<R, E>:
    for<'r> AsyncFnOnce(&'r mut AsyncPgConnection) -> Result<R, E>
    + for<'r> ConnFn<&'r mut AsyncPgConnection, Result<R, E>, Fut: Send>
    + Send
{
}

impl<F, R, E> Work<R, E> for F where
    F: for<'r> AsyncFnOnce(&'r mut AsyncPgConnection) -> Result<R, E>
        + for<'r> ConnFn<&'r mut AsyncPgConnection, Result<R, E>, Fut: Send>
        + Send
{
}

/// Runs `f` in a transaction that starts with [`Session::begin_sql`] (the lease as its own
/// timeouts), committed when `f` succeeds, rolled back when it fails: the claim cycle's
/// transaction.
pub(super) async fn transaction<R, E, F>(
    conn: &mut AsyncPgConnection,
    session: Session,
    f: F,
) -> Result<R, E>
where
    F: Work<R, E>,
    E: From<diesel::result::Error> + Send,
    R: Send,
{
    AnsiTransactionManager::begin_transaction_sql(conn, &session.begin_sql()).await?;
    let result = f(conn).await;
    finish(conn, result).await
}

/// Runs `f`, a piece of work with a pooled connection that is not a transaction of its own
/// (a heartbeat, an admin page): as it is on a connection of its own, in one [`transaction`]
/// behind a transaction pooler (see the module docs). Inside a transaction already, `f` runs in
/// it.
pub(super) async fn unit<R, E, F>(
    conn: &mut AsyncPgConnection,
    session: Session,
    f: F,
) -> Result<R, E>
where
    F: Work<R, E>,
    E: From<DbError> + Send,
    R: Send,
{
    if !session.transaction_pooled() {
        return f(conn).await;
    }
    match AnsiTransactionManager::begin_transaction_sql(conn, &session.begin_sql()).await {
        Ok(()) => {}
        Err(diesel::result::Error::AlreadyInTransaction) => return f(conn).await,
        Err(e) => return Err(DbError::Query(e).into()),
    }
    let result = f(conn).await;
    finish(conn, result.map_err(Unit::Work))
        .await
        .map_err(|e| match e {
            Unit::Work(e) => e,
            Unit::Db(e) => DbError::Query(e).into(),
        })
}

/// A [`unit`]'s own error, or one of its transaction's statements.
enum Unit<E> {
    Work(E),
    Db(diesel::result::Error),
}

impl<E> From<diesel::result::Error> for Unit<E> {
    fn from(e: diesel::result::Error) -> Self {
        Unit::Db(e)
    }
}

/// Commits after `result` is `Ok`, rolls back after an error (which is then what the caller
/// sees, unless the rollback itself failed), as diesel-async's `transaction` does.
async fn finish<R, E>(conn: &mut AsyncPgConnection, result: Result<R, E>) -> Result<R, E>
where
    E: From<diesel::result::Error>,
{
    match result {
        Ok(value) => {
            AnsiTransactionManager::commit_transaction(conn).await?;
            Ok(value)
        }
        Err(e) => match AnsiTransactionManager::rollback_transaction(conn).await {
            Ok(()) | Err(diesel::result::Error::BrokenTransactionManager) => Err(e),
            Err(rollback) => Err(rollback.into()),
        },
    }
}

/// Opens a connection (no TLS) with [`adopt`].
pub async fn connect(url: &str, mode: SessionMode) -> Result<AsyncPgConnection, ConnectionError> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    adopt(client, connection, mode).await
}

/// Makes a diesel-async connection of an opened tokio-postgres one: its connection task runs
/// on the current runtime (as with `AsyncPgConnection::establish`), diesel-async's set-up
/// statements run inside one transaction, and behind a transaction pooler the statement
/// cache is off.
pub async fn adopt<S>(
    client: tokio_postgres::Client,
    connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
    mode: SessionMode,
) -> Result<AsyncPgConnection, ConnectionError>
where
    S: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    // diesel-async runs its two `SET`s as soon as it has the connection, which it wants
    // undriven. tokio-postgres queues a request at the first poll of its future and answers
    // requests in order, so `BEGIN` queued now runs before them; its reply is read and dropped
    // by the connection task (a future dropped early only loses its answer).
    if let Some(Err(e)) = client.batch_execute("BEGIN").now_or_never() {
        return Err(ConnectionError::BadConnection(e.to_string()));
    }
    let mut conn = AsyncPgConnection::try_from_client_and_connection(client, connection).await?;
    conn.batch_execute("COMMIT")
        .await
        .map_err(ConnectionError::CouldntSetupConfiguration)?;
    if mode == SessionMode::TransactionPooled {
        conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_opens_with_the_lease_as_its_timeouts() {
        let session = Session {
            mode: SessionMode::TransactionPooled,
            lease: Duration::from_millis(2500),
        };
        assert_eq!(
            session.begin_sql(),
            "BEGIN; SET LOCAL statement_timeout = 2500; \
             SET LOCAL idle_in_transaction_session_timeout = 2500"
        );
        assert_eq!(session.setup_sql(), "SET application_name = 'outbox-relay'");
        let direct = Session {
            mode: SessionMode::Direct,
            ..session
        };
        assert!(direct.setup_sql().contains("SET statement_timeout = 2500"));
    }
}
