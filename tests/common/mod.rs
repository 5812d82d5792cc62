//! Helpers for the end-to-end tests: each test gets its own database (dropped after), its own
//! Redis key prefix (deleted after) or its own redis-server, and real relay processes.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::Connection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use redis::AsyncCommands;
use uuid::Uuid;

pub const PG_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

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
        let mut admin = AsyncPgConnection::establish(PG_ADMIN_URL)
            .await
            .expect("connect to local postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let url = format!("postgres://postgres@127.0.0.1:5432/{name}");
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

    pub async fn exec(&self, sql: &str) {
        let mut c = self.conn().await;
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
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

    /// Waits until `sql` (a bigint) equals `want`, or panics after `timeout`.
    pub async fn wait_for(&self, sql: &str, want: i64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.scalar(sql).await;
            if got == want {
                return;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for `{sql}` = {want}, last value {got}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(mut c) =
                <AsyncConnectionWrapper<AsyncPgConnection> as Connection>::establish(PG_ADMIN_URL)
            {
                let _ = SimpleConnection::batch_execute(
                    &mut c,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                );
            }
        })
        .join();
    }
}

/// A Redis key prefix of its own; keys under it are deleted on drop.
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub fn shared() -> TestRedis {
        TestRedis {
            url: REDIS_URL.into(),
            prefix: format!("t{}:", Uuid::new_v4().simple()),
        }
    }

    pub fn on(url: &str) -> TestRedis {
        TestRedis {
            url: url.into(),
            prefix: format!("t{}:", Uuid::new_v4().simple()),
        }
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        // Big XRANGE replies take longer than the client's default response timeout.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        redis::Client::open(self.url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect redis")
    }

    pub fn stream(&self, topic: &str) -> String {
        format!("{}{}", self.prefix, topic)
    }

    /// Every entry of a topic's stream, as field maps, in stream order.
    pub async fn entries(&self, topic: &str) -> Vec<HashMap<String, String>> {
        let mut c = self.conn().await;
        let reply: redis::streams::StreamRangeReply =
            c.xrange_all(self.stream(topic)).await.expect("xrange");
        reply
            .ids
            .into_iter()
            .map(|entry| {
                entry
                    .map
                    .into_iter()
                    .map(|(k, v)| {
                        let s: String = redis::from_redis_value(v).expect("string field");
                        (k, s)
                    })
                    .collect()
            })
            .collect()
    }

    pub async fn xlen(&self, topic: &str) -> usize {
        let mut c = self.conn().await;
        c.xlen(self.stream(topic)).await.unwrap_or(0)
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let url = self.url.clone();
        let pattern = format!("*{}*", self.prefix);
        let _ = std::thread::spawn(move || {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                return;
            };
            let Ok(mut c) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query(&mut c)
                .unwrap_or_default();
            for key in keys {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(&mut c);
            }
        })
        .join();
    }
}

/// A redis-server of the test's own on a free port (killed on drop).
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl OwnRedis {
    pub fn start() -> OwnRedis {
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut me = OwnRedis {
            port,
            child: None,
            dir,
        };
        me.restart();
        me
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(c) = redis::Client::open(self.url()) {
                if let Ok(mut conn) = c.get_connection() {
                    if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                        return;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("own redis-server did not start on {}", self.port);
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running `outbox-relay run` process.
pub struct RelayProc {
    pub admin_port: u16,
    pub child: Child,
    pub name: String,
}

/// Settings every test relay gets, tuned for quick tests.
pub fn base_env(db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
    vec![
        ("DATABASE_URL".into(), db.url.clone()),
        ("REDIS_URL".into(), redis.url.clone()),
        ("OUTBOX__REDIS__STREAM_PREFIX".into(), redis.prefix.clone()),
        ("OUTBOX__RELAY__POLL_INTERVAL".into(), "200ms".into()),
        ("OUTBOX__RELAY__HEARTBEAT_INTERVAL".into(), "1s".into()),
        ("OUTBOX__RELAY__LEASE".into(), "5s".into()),
        ("OUTBOX__REDIS__TIMEOUT".into(), "2s".into()),
        ("OUTBOX__RETRY__BASE".into(), "100ms".into()),
        ("OUTBOX__RETRY__MAX".into(), "1s".into()),
        ("RUST_LOG".into(), "warn,outbox_relay=info".into()),
    ]
}

impl RelayProc {
    pub fn spawn(name: &str, env: &[(String, String)]) -> RelayProc {
        let admin_port = free_port();
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("relay-{name}-{admin_port}.log")),
        )
        .expect("log file");
        let child = Command::new(BIN)
            .arg("run")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("OUTBOX__ADMIN__ADDR", format!("127.0.0.1:{admin_port}"))
            .env("OUTBOX__INSTANCE_ID", name)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn relay");
        RelayProc {
            admin_port,
            child,
            name: name.into(),
        }
    }

    /// What the relay wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(
            std::env::temp_dir().join(format!("relay-{}-{}.log", self.name, self.admin_port)),
        )
        .unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.admin_port, path)
    }

    /// HTTP status of GET `path`, or 0 when nothing answers.
    pub fn status(&self, path: &str) -> u16 {
        http_get(self.admin_port, path).map(|(s, _)| s).unwrap_or(0)
    }

    pub fn body(&self, path: &str) -> String {
        http_get(self.admin_port, path)
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// Waits until `path` answers `status`.
    pub async fn wait_status(&self, path: &str, status: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.status(path);
            if got == status {
                return;
            }
            if Instant::now() > deadline {
                panic!("{} {path}: wanted {status}, last {got}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Waits for exit; returns the exit code (None on timeout or signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 GET, enough for the admin endpoints.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().ok()?,
        Duration::from_secs(2),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Inserts `n` events with SQL: topics t0..t{topics-1}, keys k0..k{keys-1} (every 4th unkeyed);
/// payload `n` counts in insertion order, so `assert_exactly_once` can check per-key order.
pub async fn insert_events(db: &TestDb, n: usize, topics: usize, keys: usize) {
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers)
         SELECT 't' || (i % {topics}), jsonb_build_object('i', i, 'n', i, 'text', 'héllo \"quoted\" <b>'),
                CASE WHEN i % 4 = 0 THEN NULL ELSE 'k' || (i % {keys}) END,
                jsonb_build_object('trace', 'tr-' || i)
         FROM generate_series(1, {n}) AS i"
    ))
    .await;
}

/// Checks that within each key the stream holds events in insertion order, using the payload
/// field `n` (increasing per key in insertion order). Each producer counts in its own
/// million (`n / 1_000_000`): only one producer's transactions are ordered among themselves.
pub fn assert_per_key_order(entries: &[HashMap<String, String>]) {
    let mut last: HashMap<(String, i64), i64> = HashMap::new();
    for e in entries {
        let Some(key) = e.get("key") else { continue };
        let payload: serde_json::Value = serde_json::from_str(&e["payload"]).expect("payload json");
        let n = payload["n"].as_i64().expect("payload.n");
        let sequence = (key.clone(), n / 1_000_000);
        if let Some(prev) = last.get(&sequence) {
            assert!(n > *prev, "key {key}: {n} after {prev}");
        }
        last.insert(sequence, n);
    }
}

/// Inserts `rounds` transactions of `per_round` events on `topics` topics and `keys` keys;
/// payload `n` is a global insertion counter, so per-key order is checkable.
pub async fn produce_rounds(
    db_url: &str,
    start: i64,
    rounds: usize,
    per_round: i64,
    topics: usize,
    keys: usize,
    pause: Duration,
) {
    let mut conn = AsyncPgConnection::establish(db_url)
        .await
        .expect("producer connect");
    for r in 0..rounds {
        let from = start + r as i64 * per_round;
        let to = from + per_round - 1;
        conn.batch_execute(&format!(
            "INSERT INTO outbox (topic, payload, partition_key)
             SELECT 't' || (i % {topics}), jsonb_build_object('n', i), 'k' || (i % {keys})
             FROM generate_series({from}, {to}) AS i ORDER BY i"
        ))
        .await
        .expect("produce");
        tokio::time::sleep(pause).await;
    }
}

/// All entries of topics t0..t{n-1}, checking each event id appears once; returns the count.
pub async fn assert_exactly_once(redis: &TestRedis, topics: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    for t in 0..topics {
        let entries = redis.entries(&format!("t{t}")).await;
        // Duplicates first: a second copy would otherwise be reported as a reordering.
        for e in &entries {
            assert!(
                seen.insert(e["id"].clone()),
                "event {} (payload {}) written twice",
                e["id"],
                e["payload"]
            );
        }
        assert_per_key_order(&entries);
    }
    seen.len()
}

/// A PostgreSQL server of the test's own (initdb in a temp dir, a free port), so a test can
/// stop and restart it without touching the shared server.
pub struct OwnPostgres {
    pub port: u16,
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
}

fn as_postgres_user(program: &std::path::Path) -> Command {
    // initdb and postgres refuse to run as root: run them as the `postgres` user then.
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl OwnPostgres {
    pub fn start() -> OwnPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("postgres installed under /usr/lib/postgresql")
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .expect("an initdb");
        let dir = tempfile::tempdir().expect("tempdir");
        let _ = Command::new("chown")
            .arg("postgres")
            .arg(dir.path())
            .status();
        let data = dir.path().join("data");
        let out = as_postgres_user(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let me = OwnPostgres {
            port: free_port(),
            dir,
            bin,
        };
        me.restart();
        me
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn restart(&self) {
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let out = as_postgres_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["-o", &opts, "-w", "-l"])
            .arg(self.dir.path().join("log"))
            .arg("start")
            .output()
            .expect("pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Stops like a crash: no checkpoint, connections cut.
    pub fn stop(&self) {
        let _ = as_postgres_user(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}
