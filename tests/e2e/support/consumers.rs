//! Consumers for the consumer-side tests: `examples/inbox_consumer` processes (spawned,
//! SIGKILLed, their logs read), the group's state in Redis, and stream entries written the
//! way the relay writes them.

use std::path::PathBuf;
use std::process::Command;

use redis::AsyncCommands;
use uuid::Uuid;

use super::process::Logged;
use super::{TestDb, TestRedis, BIN};

/// `target/<profile>/examples/inbox_consumer`, built by `cargo test` beside the relay binary.
pub fn example_bin() -> PathBuf {
    let dir = std::path::Path::new(BIN)
        .parent()
        .expect("the binary's directory");
    let bin = dir.join("examples").join("inbox_consumer");
    // `cargo test` builds the examples, but not `cargo test --test e2e`: a stale binary
    // would test old code.
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: run `cargo build --examples --features test-hooks` (plain `cargo test` builds it too)",
                bin.display()
            )
        });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![
        root.join("examples/inbox_consumer.rs"),
        root.join("consumer/Cargo.toml"),
    ];
    if let Ok(dir) = std::fs::read_dir(root.join("consumer/src")) {
        sources.extend(dir.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    for source in sources {
        let changed = std::fs::metadata(&source).and_then(|m| m.modified());
        if let Ok(changed) = changed {
            assert!(
                changed <= built,
                "{} is older than {}: run `cargo build --examples --features test-hooks` first",
                bin.display(),
                source.display()
            );
        }
    }
    bin
}

/// A running `inbox_consumer` example.
pub struct ExampleConsumer {
    pub name: String,
    process: Logged,
}

impl std::ops::Deref for ExampleConsumer {
    type Target = Logged;
    fn deref(&self) -> &Logged {
        &self.process
    }
}

impl std::ops::DerefMut for ExampleConsumer {
    fn deref_mut(&mut self) -> &mut Logged {
        &mut self.process
    }
}

impl ExampleConsumer {
    /// Starts consumer `name` of `group` on `topic`, with the test's database and key prefix,
    /// and `args` after the required ones; its log in the temp dir.
    pub fn spawn(
        db: &TestDb,
        redis: &TestRedis,
        topic: &str,
        group: &str,
        name: &str,
        args: &[&str],
    ) -> ExampleConsumer {
        let log = std::env::temp_dir().join(format!(
            "inbox-consumer-{name}-{}.log",
            Uuid::new_v4().simple()
        ));
        let mut cmd = Command::new(example_bin());
        cmd.args(["--topic", topic, "--group", group, "--consumer", name])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &db.url)
            .env("REDIS_URL", &redis.url)
            .env("OUTBOX__REDIS__STREAM_PREFIX", &redis.prefix)
            .env("RUST_LOG", "info");
        ExampleConsumer {
            name: name.to_string(),
            process: Logged::spawn(cmd, log),
        }
    }
}

/// The group's pending entries on `topic`'s stream: the total, and per consumer.
pub async fn group_pending(
    redis: &TestRedis,
    topic: &str,
    group: &str,
) -> (usize, Vec<(String, usize)>) {
    let mut c = redis.conn().await;
    let reply: redis::RedisResult<redis::streams::StreamPendingReply> =
        c.xpending(redis.stream(topic), group).await;
    match reply {
        Ok(redis::streams::StreamPendingReply::Data(data)) => (
            data.count,
            data.consumers
                .into_iter()
                .map(|c| (c.name, c.pending))
                .collect(),
        ),
        _ => (0, Vec::new()),
    }
}

/// Appends an entry to `topic`'s stream with the relay's fields; returns the event id.
pub async fn xadd_event(
    redis: &TestRedis,
    topic: &str,
    key: Option<&str>,
    payload: &serde_json::Value,
) -> Uuid {
    xadd_event_at(redis, topic, "*", key, payload).await
}

/// [`xadd_event`] with the stream id given (`"*"`: Redis picks it), so that tests can make
/// two streams hold entries of the same ids.
pub async fn xadd_event_at(
    redis: &TestRedis,
    topic: &str,
    stream_id: &str,
    key: Option<&str>,
    payload: &serde_json::Value,
) -> Uuid {
    let id = Uuid::new_v4();
    let mut fields: Vec<(&str, String)> = vec![
        ("id", id.to_string()),
        ("topic", topic.to_string()),
        ("payload", payload.to_string()),
        ("headers", "{}".to_string()),
        ("created_at", "2026-12-02T13:57:01.123456Z".to_string()),
    ];
    if let Some(key) = key {
        fields.push(("key", key.to_string()));
    }
    let mut c = redis.conn().await;
    let _: String = c
        .xadd(redis.stream(topic), stream_id, &fields)
        .await
        .expect("xadd");
    id
}
