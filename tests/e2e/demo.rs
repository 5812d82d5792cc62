//! `outbox-relay demo` on local defaults: creates its database, produces several topics with
//! keys and a few poison events, publishes them, dead-letters the poison and parks its keys,
//! prints the admin URL, and says once that the poison is on purpose rather than repeating it.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn demo_creates_its_database_and_shows_the_whole_pipeline() {
    let name = format!("outbox_t_demo_{}", uuid::Uuid::new_v4().simple());
    let db = TestDb {
        url: pg_url(&name),
        name,
    };
    let redis = TestRedis::shared();
    let port = free_port();
    let mut demo = Command::new(BIN);
    if std::env::var_os("OUTBOX_TEST_REDIS_URL").is_some() {
        // make test-valkey: the demo's default Redis is not the one under test.
        demo.env("REDIS_URL", &redis.url);
    }
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut child = demo
        .args(["demo", "--rate", "200", "--database-url", &db.url])
        .args(["--admin-addr", &format!("127.0.0.1:{port}")])
        .env("OUTBOX__REDIS__STREAM_PREFIX", &redis.prefix)
        .env("OUTBOX__RETRY__BASE", "200ms")
        .env_remove("RUST_LOG")
        .env_remove("OUTBOX__LOG__LEVEL")
        .stdout(Stdio::piped())
        .stderr(log.reopen().expect("log file"))
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
    // The poison topic parks its keys: a later poison event of a dead key waits behind it.
    let admin = Http::new(port);
    eventually(
        Duration::from_secs(30),
        "the three poison keys parked, events held behind their dead ones",
        || async {
            let parked = admin.get("/api/v1/topics/demo.poison/parked").json;
            parked["keys"]
                .as_array()
                .is_some_and(|keys| {
                    keys.len() == 3 && keys.iter().any(|k| k["held"].as_i64() > Some(0))
                })
                .then_some(())
                .ok_or(parked.to_string())
        },
    )
    .await;
    let mut c = redis.conn().await;
    let groups: redis::streams::StreamInfoGroupsReply =
        redis::AsyncCommands::xinfo_groups(&mut c, redis.stream("order.created"))
            .await
            .expect("xinfo groups");
    let mut names: Vec<String> = groups.groups.iter().map(|g| g.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["billing", "shipping"], "the demo's consumer groups");
    // billing has a (slow) consumer: it reads; shipping has none.
    eventually(
        Duration::from_secs(20),
        "the demo's billing consumer to read",
        || async {
            let mut c = redis.conn().await;
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
            read("billing")
        },
    )
    .await;

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exited = eventually(
        Duration::from_secs(10),
        "the demo to exit on SIGTERM",
        || {
            let exited = child.try_wait().expect("the demo's status");
            async move { exited }
        },
    )
    .await;
    assert_eq!(exited.code(), Some(0), "demo exits 0 on SIGTERM");
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    assert!(
        stdout.contains(&format!("http://127.0.0.1:{port}/")),
        "{stdout}"
    );
    let log = std::fs::read_to_string(log.path()).expect("the demo's log");
    assert_intended_poison_said_once(&log);
}

/// The demo's log says once that the poison is on purpose, and logs each failing event once
/// when it starts failing and once when it goes dead, not once per attempt.
fn assert_intended_poison_said_once(log: &str) {
    let notices = log.matches("poison on purpose").count();
    assert_eq!(notices, 1, "the intended-poison notice, once:\n{log}");
    let mut lines: std::collections::HashMap<(&str, &str), usize> = Default::default();
    for line in log.lines() {
        let kind = if line.contains("publish failed: ") {
            "failed"
        } else if line.contains("event dead-lettered: ") {
            "dead"
        } else {
            continue;
        };
        let event = line
            .split_whitespace()
            .find_map(|field| field.strip_prefix("event="))
            .unwrap_or_else(|| panic!("a failure line without its event: {line}"));
        *lines.entry((event, kind)).or_default() += 1;
    }
    assert!(
        lines.keys().any(|(_, kind)| *kind == "dead"),
        "a dead event was logged:\n{log}"
    );
    for ((event, kind), n) in &lines {
        assert_eq!(*n, 1, "{kind} lines of event {event}:\n{log}");
    }
}

/// Stops a private cluster when the test ends, however it ends.
struct PrivatePg {
    dir: std::path::PathBuf,
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args(["scripts/private-pg.sh", "--stop"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PRIVATE_PG_DIR", &self.dir)
            .status();
    }
}

/// The system's `pg_hba.conf` files, as they are now.
fn pg_hba_files() -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for version in std::fs::read_dir("/etc/postgresql")
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = version.path().join("main/pg_hba.conf");
        if let Ok(text) = std::fs::read(&path) {
            files.push((path, text));
        }
    }
    files
}

/// On a machine whose Postgres does not let the demo and the tests in, `make services` leaves
/// that server's `pg_hba.conf` alone and starts a private cluster of the project's instead
/// (asked for here with `OUTBOX_PRIVATE_PG=1`, as the shared server here does let us in): the
/// relay migrates a database there, a second run reuses it, and `--stop` stops it.
#[test]
fn services_start_a_private_postgres_instead_of_opening_the_systems() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().expect("tempdir");
    // As root the cluster belongs to the postgres user, who must reach the directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cluster = dir.path().join("pg");
    let port = free_port();
    let hba_before = pg_hba_files();
    let services = || {
        Command::new("bash")
            .arg("scripts/services.sh")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("OUTBOX_PRIVATE_PG", "1")
            .env("PRIVATE_PG_DIR", &cluster)
            .env("PRIVATE_PG_PORT", port.to_string())
            .output()
            .expect("run services.sh")
    };
    let _stop = PrivatePg {
        dir: cluster.clone(),
    };
    let first = services();
    let said = String::from_utf8_lossy(&first.stdout).to_string()
        + &String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    assert!(said.contains("private cluster"), "{said}");
    let addr = std::fs::read_to_string(cluster.join("addr")).expect("the address file");
    assert_eq!(addr.trim(), format!("127.0.0.1:{port}"));
    let migrate = Command::new(BIN)
        .arg("migrate")
        .env_clear()
        .env(
            "DATABASE_URL",
            format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        )
        .output()
        .expect("run migrate");
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let again = services();
    assert!(again.status.success());
    assert!(
        !String::from_utf8_lossy(&again.stdout).contains("creating"),
        "the second run reuses the cluster"
    );
    assert_eq!(
        pg_hba_files(),
        hba_before,
        "the system's pg_hba.conf is untouched"
    );
    let stopped = Command::new("bash")
        .args(["scripts/private-pg.sh", "--stop"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PRIVATE_PG_DIR", &cluster)
        .status()
        .expect("stop");
    assert!(stopped.success());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "stopped"
    );
    assert!(!cluster.join("addr").exists());
}
