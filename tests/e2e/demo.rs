//! `outbox-relay demo` on local defaults: creates its database, produces several topics with
//! keys and a few poison events, publishes them, dead-letters the poison, prints the admin URL.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn demo_creates_its_database_and_shows_the_whole_pipeline() {
    let name = format!("outbox_t_demo_{}", uuid::Uuid::new_v4().simple());
    let db = TestDb {
        url: format!("postgres://postgres@127.0.0.1:5432/{name}"),
        name,
    };
    let redis = TestRedis::shared();
    let port = free_port();
    let mut demo = Command::new(BIN);
    if std::env::var_os("OUTBOX_TEST_REDIS_URL").is_some() {
        // make test-valkey: the demo's default Redis is not the one under test.
        demo.env("REDIS_URL", &redis.url);
    }
    let mut child = demo
        .args(["demo", "--rate", "200", "--database-url", &db.url])
        .args(["--admin-addr", &format!("127.0.0.1:{port}")])
        .env("OUTBOX__REDIS__STREAM_PREFIX", &redis.prefix)
        .env("OUTBOX__RETRY__BASE", "200ms")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn demo");
    Http::new(port)
        .wait_status("/readyz", 200, Duration::from_secs(30))
        .await;
    db.wait_for(
        "SELECT (count(DISTINCT topic) FILTER (WHERE published_at IS NOT NULL) >= 3)::int FROM outbox",
        1,
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "SELECT (count(*) FILTER (WHERE dead_at IS NOT NULL AND topic = 'demo.poison') >= 1)::int FROM outbox",
        1,
        Duration::from_secs(40),
    )
    .await;
    assert!(
        db.scalar("SELECT count(*) FROM outbox WHERE partition_key IS NOT NULL")
            .await
            > 0
    );
    assert!(redis.xlen("order.created").await > 0);
    let mut c = redis.conn().await;
    let groups: redis::streams::StreamInfoGroupsReply =
        redis::AsyncCommands::xinfo_groups(&mut c, redis.stream("order.created"))
            .await
            .expect("xinfo groups");
    let mut names: Vec<String> = groups.groups.iter().map(|g| g.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["billing", "shipping"], "the demo's consumer groups");
    // billing has a (slow) consumer: it reads; shipping has none.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let groups: redis::streams::StreamInfoGroupsReply =
            redis::AsyncCommands::xinfo_groups(&mut c, redis.stream("order.created"))
                .await
                .expect("xinfo groups");
        let read = |name: &str| {
            groups
                .groups
                .iter()
                .any(|g| g.name == name && g.last_delivered_id != "0-0")
        };
        assert!(!read("shipping"), "nobody reads shipping");
        if read("billing") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo's billing consumer never read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut code = None;
    for _ in 0..200 {
        if let Ok(Some(status)) = child.try_wait() {
            code = status.code();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, Some(0), "demo exits 0 on SIGTERM");
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    assert!(
        stdout.contains(&format!("http://127.0.0.1:{port}/")),
        "{stdout}"
    );
}
