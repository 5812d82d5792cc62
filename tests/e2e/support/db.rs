//! A database per test: created, migrated, dropped on drop; scalar, exec and wait helpers; and a
//! PostgreSQL server of the test's own for outages.

use std::process::Command;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::pg::PgNotification;
use diesel::Connection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use futures::{Stream, StreamExt};
use uuid::Uuid;

use outbox_testkit::postgres::LocalPostgres;

use super::eventually;

pub use outbox_testkit::services::{pg_addr, pg_url};

/// A database of its own, migrated, dropped on drop.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let db = TestDb::empty().await;
        outbox_relay::db::migrate::run_pending(&db.url)
            .await
            .expect("migrate test database");
        db
    }

    /// An existing database (not dropped by this handle's owner unless it is forgotten).
    pub fn at(url: &str) -> TestDb {
        TestDb {
            name: String::new(),
            url: url.to_string(),
        }
    }

    /// A database of its own, not migrated.
    pub async fn empty() -> TestDb {
        let name = format!("outbox_t_{}", Uuid::new_v4().simple());
        let mut admin = AsyncPgConnection::establish(&pg_url("postgres"))
            .await
            .expect("connect to local postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let url = pg_url(&name);
        TestDb { name, url }
    }

    pub async fn conn(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url)
            .await
            .expect("connect test db")
    }

    /// A connection LISTENing on the outbox trigger's channel.
    pub async fn listener(&self) -> AsyncPgConnection {
        let mut c = self.conn().await;
        c.batch_execute("LISTEN outbox_events")
            .await
            .expect("listen");
        c
    }

    /// Runs SQL returning one bigint.
    pub async fn scalar(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            v: i64,
        }
        use diesel_async::RunQueryDsl;
        let mut c = self.conn().await;
        let v: V = diesel::sql_query(format!("SELECT ({sql})::bigint AS v"))
            .get_result(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        v.v
    }

    /// Runs SQL returning one text.
    pub async fn text(&self, sql: &str) -> String {
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::Text)]
            v: String,
        }
        use diesel_async::RunQueryDsl;
        let mut c = self.conn().await;
        let v: V = diesel::sql_query(format!("SELECT ({sql})::text AS v"))
            .get_result(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        v.v
    }

    pub async fn exec(&self, sql: &str) {
        self.try_exec(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// [`TestDb::exec`] for a statement the test expects Postgres may refuse: its error.
    pub async fn try_exec(&self, sql: &str) -> Result<(), String> {
        let mut c = self.conn().await;
        c.batch_execute(sql).await.map_err(|e| e.to_string())
    }

    pub async fn pending(&self) -> i64 {
        self.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL")
            .await
    }

    /// Waits until every event has been published (`published_at` set), or panics after
    /// `timeout`.
    pub async fn wait_until_published(&self, timeout: Duration) {
        self.wait_for(
            "SELECT count(*) FROM outbox WHERE published_at IS NULL",
            0,
            timeout,
        )
        .await
    }

    /// Waits until `n` events of `topic` are published.
    pub async fn wait_published(&self, topic: &str, n: i64, timeout: Duration) {
        let sql = format!(
            "SELECT count(*) FROM outbox WHERE topic = '{topic}' AND published_at IS NOT NULL"
        );
        self.wait_for(&sql, n, timeout).await
    }

    /// Waits until `sql` (a bigint) equals `want`, or panics after `timeout`.
    pub async fn wait_for(&self, sql: &str, want: i64, timeout: Duration) {
        eventually(timeout, &format!("`{sql}` = {want}"), || async {
            match self.scalar(sql).await {
                got if got == want => Ok(()),
                got => Err(format!("last value {got}")),
            }
        })
        .await
    }
    /// Returns once a claim cycle that began after this call has committed: a sentinel event
    /// inserted now is published (then its row is deleted, so counts are as before; its
    /// stream entry stays, under the `e2e.sentinel` topic). Everything committed before the
    /// call was in that cycle's snapshot: a test waits on this before asserting that
    /// something was *not* published.
    pub async fn wait_for_a_claim_cycle(&self, timeout: Duration) {
        let marker = Uuid::new_v4();
        self.exec(&format!(
            "INSERT INTO outbox (topic, payload) VALUES ('e2e.sentinel', '{{\"marker\": \"{marker}\"}}')"
        ))
        .await;
        // In delete mode the row is gone once published: count the unpublished ones.
        let waiting = format!(
            "SELECT count(*) FROM outbox WHERE payload->>'marker' = '{marker}' AND published_at IS NULL"
        );
        self.wait_for(&waiting, 0, timeout).await;
        self.exec(&format!(
            "DELETE FROM outbox WHERE payload->>'marker' = '{marker}'"
        ))
        .await;
    }

    /// The payloads of the `outbox_events` notifications that arrive before a marker NOTIFY
    /// this call sends. Postgres delivers notifications in commit order, so these are all
    /// the ones sent by transactions committed before the call; a test asserts on them
    /// instead of waiting some time for a NOTIFY that should not come.
    pub async fn notifications_before_marker<S>(&self, notifications: &mut S) -> Vec<String>
    where
        S: Stream<Item = diesel::QueryResult<PgNotification>> + Unpin,
    {
        let marker = format!("e2e-marker-{}", Uuid::new_v4().simple());
        self.exec(&format!("NOTIFY outbox_events, '{marker}'"))
            .await;
        let mut before = Vec::new();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(10), notifications.next()).await;
            let payload = match next {
                Ok(Some(Ok(n))) => n.payload,
                other => panic!("the marker NOTIFY never arrived: {other:?}"),
            };
            if payload == marker {
                return before;
            }
            before.push(payload);
        }
    }

    /// Inserts an event of `topic` dead after 10 attempts with `error` (as the relay would
    /// leave it), `payload_sql` its payload as an SQL expression; returns its id.
    pub async fn dead_event(
        &self,
        topic: &str,
        key: Option<&str>,
        payload_sql: &str,
        error: &str,
    ) -> String {
        use diesel::sql_types::{Nullable, Text};
        use diesel_async::RunQueryDsl;
        #[derive(diesel::QueryableByName)]
        struct Id {
            #[diesel(sql_type = Text)]
            id: String,
        }
        let mut c = self.conn().await;
        let row: Id = diesel::sql_query(format!(
            "INSERT INTO outbox (topic, payload, partition_key, attempts, last_error, dead_at)
             VALUES ($1, {payload_sql}, $2, 10, $3, now()) RETURNING id::text AS id"
        ))
        .bind::<Text, _>(topic)
        .bind::<Nullable<Text>, _>(key)
        .bind::<Text, _>(error)
        .get_result(&mut c)
        .await
        .expect("insert dead event");
        row.id
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(mut c) = <AsyncConnectionWrapper<AsyncPgConnection> as Connection>::establish(
                &pg_url("postgres"),
            ) {
                let _ = SimpleConnection::batch_execute(
                    &mut c,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                );
            }
        })
        .join();
    }
}

/// The server options presenting `cert`, its key copied where a server accepts it (owned by
/// the server's user, mode 0600).
fn tls_options(cert: &std::path::Path, key: &std::path::Path) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (own_cert, own_key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::copy(cert, &own_cert).expect("copy cert");
    std::fs::copy(key, &own_key).expect("copy key");
    for path in [dir.path(), own_cert.as_path(), own_key.as_path()] {
        let _ = Command::new("chown").arg("postgres").arg(path).status();
    }
    let _ = Command::new("chmod").arg("600").arg(&own_key).status();
    let options = format!(
        "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
        own_cert.display(),
        own_key.display()
    );
    // The files outlive the server: it reads them at start and at reloads.
    std::mem::forget(dir);
    options
}

/// A PostgreSQL server of the test's own ([`LocalPostgres`]), so a test can stop, promote
/// and restart it without touching the shared server. Panics where the rig fails.
pub struct OwnPostgres(LocalPostgres);

impl std::ops::Deref for OwnPostgres {
    type Target = LocalPostgres;
    fn deref(&self) -> &LocalPostgres {
        &self.0
    }
}

impl OwnPostgres {
    /// A server of its own with the outbox migrated, and its database as a [`TestDb`].
    pub async fn start_migrated() -> (OwnPostgres, TestDb) {
        let pg = OwnPostgres::start();
        outbox_relay::db::migrate::run_pending(&pg.url())
            .await
            .expect("migrate");
        let db = TestDb::at(&pg.url());
        (pg, db)
    }

    pub fn start() -> OwnPostgres {
        OwnPostgres(LocalPostgres::start("").expect("a postgres of the test's own"))
    }

    /// A server of its own with TLS on, presenting `cert` (its key is copied where the server
    /// accepts it: owned by the server's user, mode 0600).
    pub fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> OwnPostgres {
        OwnPostgres(
            LocalPostgres::start(&tls_options(cert, key))
                .expect("a postgres of the test's own with TLS"),
        )
    }

    /// A streaming standby of `primary` with TLS on, presenting `cert` (its own, not the
    /// primary's).
    pub fn standby_tls(
        primary: &OwnPostgres,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> OwnPostgres {
        let options = tls_options(cert, key);
        OwnPostgres(
            primary
                .0
                .standby_with(primary.port(), &options)
                .expect("a standby with TLS"),
        )
    }

    /// A streaming standby of `primary` (`pg_basebackup -R`), started on a port of its own.
    pub fn standby_of(primary: &OwnPostgres) -> OwnPostgres {
        OwnPostgres::standby_through(primary, primary.port())
    }

    /// [`OwnPostgres::standby_of`], its replication connection to `port` (a proxy in front
    /// of the primary that the test can hold).
    pub fn standby_through(primary: &OwnPostgres, port: u16) -> OwnPostgres {
        OwnPostgres(primary.0.standby_through(port).expect("a standby"))
    }

    /// Promotes a standby to primary; returns once it accepts writes.
    pub fn promote(&self) {
        self.0.promote().expect("pg_ctl promote");
    }

    pub fn restart(&self) {
        self.0.restart().expect("pg_ctl start");
    }
}
