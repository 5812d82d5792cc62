//! A PgBouncer of the test's own, in transaction pooling mode in front of the shared Postgres,
//! with so few server connections that the relays' clients really share them; and the checks
//! that nothing a relay did stayed behind on them.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{base_env, eventually_blocking, free_port, TestDb, TestRedis};
use outbox_testkit::postgres::running_as_root;

/// Server connections per database: a relay alone has 8 clients (`database.pool_size`).
const SERVER_CONNECTIONS: usize = 3;

/// A `pgbouncer` process on a free port (killed on drop).
pub struct PgBouncer {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// Starts one with `pool_mode = transaction` and [`SERVER_CONNECTIONS`] per database, in
    /// front of the tests' Postgres (any database, user `postgres`, trust); waits until it
    /// listens.
    pub fn start() -> PgBouncer {
        let port = free_port();
        let (pg_host, pg_port) = super::db::pg_addr();
        let dir = tempfile::tempdir().expect("tempdir");
        let ini = dir.path().join("pgbouncer.ini");
        let users = dir.path().join("userlist.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n").expect("write userlist");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={pg_host} port={pg_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {SERVER_CONNECTIONS}\n\
                 min_pool_size = 0\n\
                 reserve_pool_size = 0\n\
                 max_client_conn = 200\n\
                 ignore_startup_parameters = extra_float_digits,options\n",
                users = users.display()
            ),
        )
        .expect("write pgbouncer.ini");
        let log = std::fs::File::create(dir.path().join("pgbouncer.log")).expect("log file");
        // Debian installs it in /usr/sbin, which a user's PATH may not hold.
        let bin = ["/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("pgbouncer");
        let mut command = Command::new(bin);
        if running_as_root() {
            // pgbouncer refuses to run as root; `-u` makes it switch to that user itself (so
            // the child is pgbouncer, and killing it stops it).
            for path in [dir.path(), &ini, &users] {
                let _ = Command::new("chown").arg("postgres").arg(path).status();
            }
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn pgbouncer (make services installs it)");
        let mut me = PgBouncer { port, child, dir };
        eventually_blocking(Duration::from_secs(10), "pgbouncer to listen", || {
            if let Ok(Some(status)) = me.child.try_wait() {
                panic!("pgbouncer exited with {status}: {}", me.log());
            }
            TcpStream::connect(("127.0.0.1", port))
                .map(drop)
                .map_err(|e| format!("{e}: {}", me.log()))
        });
        me
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        let path = self.dir.path().join("pgbouncer.log");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read the log {}: {e}", path.display()))
    }

    /// `db` reached through this pooler.
    pub fn url(&self, db: &TestDb) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.port, db.name)
    }

    /// [`base_env`] with `DATABASE_URL` through this pooler, and the documented settings for a
    /// pooler in transaction mode: `relay.poll_only`, no prepared statements.
    pub fn relay_env(&self, db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
        let mut env = self.pooler_url_env(db, redis);
        env.push(("OUTBOX__DATABASE__POOLER".into(), "transaction".into()));
        env
    }

    /// The same through the two settings that meant a transaction pooler before
    /// `database.pooler` named it: `relay.poll_only` and `database.prepared_statements =
    /// false`.
    pub fn relay_env_by_two_settings(
        &self,
        db: &TestDb,
        redis: &TestRedis,
    ) -> Vec<(String, String)> {
        let mut env = self.pooler_url_env(db, redis);
        env.push(("OUTBOX__RELAY__POLL_ONLY".into(), "true".into()));
        env.push((
            "OUTBOX__DATABASE__PREPARED_STATEMENTS".into(),
            "false".into(),
        ));
        env
    }

    fn pooler_url_env(&self, db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = base_env(db, redis)
            .into_iter()
            .filter(|(k, _)| k != "DATABASE_URL")
            .collect();
        env.push(("DATABASE_URL".into(), self.url(db)));
        env
    }

    /// Once the relays have stopped: each server connection the pooler keeps for `db` holds no
    /// session setting, prepared statement or advisory lock that a relay left there. The
    /// checks run in [`SERVER_CONNECTIONS`] transactions open at once, so each is on a server
    /// connection of its own: together they see every one.
    pub async fn assert_servers_clean(&self, db: &TestDb) {
        let mut clients = Vec::new();
        for _ in 0..SERVER_CONNECTIONS {
            let (client, connection) =
                tokio_postgres::connect(&self.url(db), tokio_postgres::NoTls)
                    .await
                    .expect("connect through pgbouncer");
            tokio::spawn(connection);
            clients.push(client);
        }
        let mut pids = std::collections::HashSet::new();
        for client in &clients {
            // The simple protocol: one round trip, no prepared statement of the test's own.
            let rows = client
                .simple_query(
                    "BEGIN; SELECT pg_backend_pid(), current_setting('statement_timeout'),
                            current_setting('idle_in_transaction_session_timeout'),
                            (SELECT count(*) FROM pg_prepared_statements),
                            (SELECT count(*) FROM pg_locks
                             WHERE locktype = 'advisory' AND pid = pg_backend_pid())",
                )
                .await
                .expect("inspect a server connection");
            let row = rows
                .iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
                    _ => None,
                })
                .expect("a row");
            let value = |i: usize| {
                row.get(i)
                    .unwrap_or_else(|| panic!("column {i} of the inspection is NULL"))
                    .to_string()
            };
            pids.insert(value(0));
            assert_eq!(
                (value(1), value(2), value(3), value(4)),
                ("0".into(), "0".into(), "0".into(), "0".into()),
                "server connection {}: statement_timeout, idle_in_transaction_session_timeout, \
                 prepared statements, advisory locks left by a client",
                value(0)
            );
        }
        assert_eq!(pids.len(), SERVER_CONNECTIONS, "one server connection each");
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
