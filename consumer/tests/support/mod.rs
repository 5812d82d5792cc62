//! The suite's harness: a database of the test's own (with the inbox's tables and an effects
//! table, dropped on drop), a key prefix of its own on the shared Redis (its keys deleted on
//! drop), entries as the relay writes them, and one waiting helper. Every helper fails the
//! test on an error: none turns "unreachable" into "nothing there".

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::{Duration, Instant};

use diesel::sql_types::{Integer, Text, Uuid as SqlUuid};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures::future::BoxFuture;
use outbox_consumer::inbox::{self, PgPool};
use outbox_consumer::{Entry, Lease};
use outbox_core::entry::field;
use outbox_testkit::services;
use redis::Value;

/// What a test needs: its database (with a pool) and its Redis key prefix.
pub struct Bundle {
    pub db: TestDb,
    pub pool: PgPool,
    pub redis: TestRedis,
}

/// A fresh database with the inbox's tables and `effects (event_id, topic, n)` (no unique
/// key: an effect applied twice shows as two rows), a pool on it, and a key prefix.
pub async fn setup() -> Bundle {
    let db = TestDb::new().await;
    let mut conn = db.conn().await;
    inbox::ensure_table(&mut conn).await.expect("inbox tables");
    conn.batch_execute(
        "CREATE TABLE effects (event_id uuid NOT NULL, topic text NOT NULL, n int NOT NULL)",
    )
    .await
    .expect("effects table");
    let pool = db.pool(4).await;
    Bundle {
        db,
        pool,
        redis: TestRedis::new(),
    }
}

/// A database of its own on the tests' Postgres, dropped on drop.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let name = services::unique_name("outbox_c");
        let mut admin = AsyncPgConnection::establish(&services::pg_url("postgres"))
            .await
            .expect("connect to the tests' postgres");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        let url = services::pg_url(&name);
        TestDb { name, url }
    }

    pub async fn conn(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url)
            .await
            .expect("connect to the test database")
    }

    pub async fn pool(&self, size: u32) -> PgPool {
        let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(&self.url);
        bb8::Pool::builder()
            .max_size(size)
            .build(manager)
            .await
            .expect("pool")
    }

    /// The one bigint an SQL statement returns.
    pub async fn scalar(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let row: Row = diesel::sql_query(format!("SELECT ({sql})::bigint AS n"))
            .get_result(&mut self.conn().await)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.n
    }

    /// Effects applied for `id`.
    pub async fn effects_of(&self, id: uuid::Uuid) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM effects WHERE event_id = '{id}'"
        ))
        .await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime: a thread with a runtime of its own does the I/O.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let mut admin = AsyncPgConnection::establish(&services::pg_url("postgres"))
                    .await
                    .map_err(std::io::Error::other)?;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(std::io::Error::other)
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop the test database: {e}");
        }
    }
}

/// A key prefix of its own on the shared Redis; its keys are deleted on drop.
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub fn new() -> TestRedis {
        TestRedis {
            url: services::redis_url(),
            prefix: format!("{}:", services::unique_name("tc")),
        }
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the tests' redis")
    }

    pub fn stream(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    /// Appends `entry`'s event to its topic's stream with the relay's fields; returns the
    /// stream id.
    pub async fn xadd(&self, entry: &Entry) -> String {
        let mut fields: Vec<(&str, String)> = vec![
            (field::ID, entry.id.to_string()),
            (field::TOPIC, entry.topic.clone()),
            (field::PAYLOAD, entry.payload.to_string()),
            (field::HEADERS, entry.headers.to_string()),
            (field::CREATED_AT, CREATED_AT.to_string()),
        ];
        if let Some(key) = &entry.key {
            fields.push((field::KEY, key.clone()));
        }
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.stream(&entry.topic)).arg("*");
        for (name, value) in &fields {
            cmd.arg(*name).arg(value);
        }
        cmd.query_async(&mut self.conn().await).await.expect("xadd")
    }

    /// `group`'s view of `topic`'s stream: the last id delivered, and the entries pending;
    /// `None` while the group does not exist.
    pub async fn group_state(&self, topic: &str, group: &str) -> Option<(String, usize)> {
        let reply: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(self.stream(topic))
            .query_async(&mut self.conn().await)
            .await
            .expect("xinfo groups");
        reply
            .groups
            .into_iter()
            .find(|g| g.name == group)
            .map(|info| (info.last_delivered_id, info.pending))
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let url = self.url.clone();
        let pattern = format!("{}*", self.prefix);
        let deleted = std::thread::spawn(move || -> redis::RedisResult<()> {
            let mut c = redis::Client::open(url.as_str())?.get_connection()?;
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut c)?;
            for key in keys {
                redis::cmd("DEL").arg(key).query::<()>(&mut c)?;
            }
            Ok(())
        })
        .join();
        if let Ok(Err(e)) = deleted {
            eprintln!("could not delete the test's redis keys: {e}");
        }
    }
}

const CREATED_AT: &str = "2026-12-05T10:00:00.000000Z";

/// What an [`entry`] is built from; the defaults are a new event of topic `t0` in group `g`.
pub struct EntryOpts {
    pub topic: &'static str,
    pub group: &'static str,
    pub key: Option<&'static str>,
    pub n: i32,
    pub lease: Option<Lease>,
}

impl Default for EntryOpts {
    fn default() -> Self {
        EntryOpts {
            topic: "t0",
            group: "g",
            key: None,
            n: 0,
            lease: None,
        }
    }
}

/// An entry as a consumer of `opts.group` would be handed it: a new event id, payload
/// `{"n": opts.n}`.
pub fn entry(opts: EntryOpts) -> Entry {
    let mut fields: Vec<(String, Value)> = [
        (field::ID, uuid::Uuid::new_v4().to_string()),
        (field::TOPIC, opts.topic.to_string()),
        (
            field::PAYLOAD,
            serde_json::json!({ "n": opts.n }).to_string(),
        ),
        (field::HEADERS, "{}".to_string()),
        (field::CREATED_AT, CREATED_AT.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), Value::BulkString(v.into_bytes())))
    .collect();
    if let Some(key) = opts.key {
        fields.push((
            field::KEY.into(),
            Value::BulkString(key.as_bytes().to_vec()),
        ));
    }
    let mut entry = Entry::from_pairs("1-0", &fields).expect("a well-formed entry");
    entry.group = opts.group.into();
    entry.lease = opts.lease;
    entry
}

/// The effect the tests wrap in the inbox: one `effects` row per application.
pub fn insert_effect<'r>(
    conn: &'r mut AsyncPgConnection,
    entry: &'r Entry,
) -> BoxFuture<'r, Result<(), diesel::result::Error>> {
    Box::pin(async move {
        diesel::sql_query("INSERT INTO effects (event_id, topic, n) VALUES ($1, $2, $3)")
            .bind::<SqlUuid, _>(entry.id)
            .bind::<Text, _>(&entry.topic)
            .bind::<Integer, _>(entry.payload["n"].as_i64().unwrap_or(-1) as i32)
            .execute(conn)
            .await
            .map(|_| ())
    })
}

/// The batch effect: one `effects` row per entry handed to it.
pub fn insert_effects<'r>(
    conn: &'r mut AsyncPgConnection,
    entries: &'r [Entry],
) -> BoxFuture<'r, Result<(), diesel::result::Error>> {
    Box::pin(async move {
        for entry in entries {
            insert_effect(conn, entry).await?;
        }
        Ok(())
    })
}

/// Waits until `check` says yes, failing the test with its last answer after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => {
                panic!("still not so after {timeout:?}: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
