//! The command line: bad settings exit 2 with one clear line; concurrent `migrate` is safe;
//! `--help` works everywhere.

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::*;

fn relay(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run binary")
}

/// The standard output of a command that must have exited 0 (its stderr otherwise).
fn succeeded(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_config_error(out: &Output, setting: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains(setting), "names {setting}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_settings_exit_2_naming_the_setting() {
    let db = ("DATABASE_URL", "postgres://postgres@127.0.0.1/none");
    assert_config_error(&relay(&["run"], &[]), "database.url");
    assert_config_error(
        &relay(&["run"], &[("DATABASE_URL", "not a url")]),
        "database.url",
    );
    assert_config_error(
        &relay(
            &["run"],
            &[(
                "DATABASE_URL",
                "postgres://h/db?sslmode=verify-full&sslrootcert=/nowhere/ca.pem",
            )],
        ),
        "database.url",
    );
    let rediss = ("REDIS_URL", "rediss://localhost:6380");
    assert_config_error(
        &relay(
            &["run"],
            &[db, rediss, ("OUTBOX__REDIS__CA_FILE", "/nowhere/ca.pem")],
        ),
        "redis.ca_file",
    );
    assert_config_error(
        &relay(
            &["run"],
            &[
                db,
                rediss,
                ("OUTBOX__REDIS__CLIENT_CERT_FILE", "/etc/hostname"),
            ],
        ),
        "redis.client_cert_file",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__REDIS__CA_FILE", "/etc/hostname")]),
        "redis.ca_file",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__RETRY__MAX_ATTEMPTS", "many")]),
        "retry.max_attempts",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__RETRY__BASE", "soon")]),
        "retry.base",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__RELAY__LEASES", "1s")]),
        "relay.leases",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("REDIS_URL", "http://x")]),
        "redis.url",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__ADMIN__ADDR", "nowhere")]),
        "admin.addr",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__ADMIN__ADDR", "0.0.0.0:8080")]),
        "admin.token",
    );
    assert_config_error(
        &relay(&["run"], &[db, ("OUTBOX__REDIS__ENVELOPE", "xml")]),
        "redis.envelope",
    );
    assert_config_error(
        &relay(
            &["run"],
            &[db, ("OUTBOX__REDIS__CLOUDEVENTS_SOURCE", "/a b")],
        ),
        "redis.cloudevents_source",
    );
    let (_topics, topics) = config_file("[[topics]]\nname = \"t\"\nenvelope = \"avro\"\n");
    assert_config_error(&relay(&["run", "--config", &topics], &[db]), "topics");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[retention]\npublished_for = \"forever\"\n").expect("write");
    let path = file.to_string_lossy().to_string();
    assert_config_error(
        &relay(&["migrate", "--config", &path], &[db]),
        "retention.published_for",
    );
    assert_config_error(
        &relay(&["run", "--config", "/nonexistent.toml"], &[db]),
        "--config",
    );
}

#[test]
fn help_works_for_every_command() {
    let top = relay(&["--help"], &[]);
    assert_eq!(top.status.code(), Some(0));
    let text = String::from_utf8_lossy(&top.stdout);
    for command in [
        "migrate",
        "run",
        "demo",
        "tail",
        "repartition",
        "replay",
        "config",
    ] {
        assert!(text.contains(command), "{text}");
    }
    // The benchmark is the outbox-bench binary, not a command users get.
    assert!(!text.contains("bench"), "{text}");
    for args in [
        ["run", "--help"],
        ["migrate", "--help"],
        ["demo", "--help"],
        ["tail", "--help"],
    ] {
        let out = relay(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("--config"),
            "{args:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_migrate_is_safe_and_idempotent() {
    concurrent_migrate(|db| db.url.clone()).await;
}

/// Four `migrate` at once on a fresh database reached at `url`, then a fifth: each migration
/// applied once, all exit 0. Returns the database.
pub(crate) async fn concurrent_migrate(url: impl FnOnce(&TestDb) -> String) -> TestDb {
    let db = TestDb::empty().await;
    let url = url(&db);
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(BIN)
                .arg("migrate")
                .env_clear()
                .env("DATABASE_URL", &url)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn migrate")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let migrations = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .expect("migrations dir")
        .count() as i64;
    assert_eq!(
        db.scalar("SELECT count(*) FROM __diesel_schema_migrations")
            .await,
        migrations,
        "each migration applied exactly once"
    );
    assert_eq!(db.scalar("SELECT count(*) FROM outbox").await, 0);
    // The outbox is vacuumed as a queue, not at Postgres's default 20% of dead rows.
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM pg_class WHERE relname = 'outbox'
               AND 'autovacuum_vacuum_scale_factor=0' = ANY (reloptions)
               AND 'autovacuum_vacuum_threshold=10000' = ANY (reloptions)"
        )
        .await,
        1
    );
    let again = relay(&["migrate"], &[("DATABASE_URL", &url)]);
    assert_eq!(again.status.code(), Some(0));
    db
}

#[test]
fn config_prints_the_effective_settings_without_secrets() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "[relay]\nlease = \"10s\"\n[retry]\nmax_attempts = 4\n",
    )
    .expect("write");
    let file = file.display().to_string();
    let out = relay(
        &["config", "--config", &file, "--instance-id", "r7"],
        &[
            ("DATABASE_URL", "postgres://app:hunter2@db.internal/app"),
            ("REDIS_URL", "redis://:hunter2@cache.internal:6379"),
            ("OUTBOX__ADMIN__TOKEN", "hunter2"),
            ("OUTBOX__ADMIN__ADDR", "0.0.0.0:8080"),
            ("OUTBOX__LOG__FORMAT", "json"),
        ],
    );
    let text = succeeded(&out);
    assert!(!text.contains("hunter2"), "{text}");
    for shown in [
        "postgres://app:***@db.internal/app",
        "redis://:***@cache.internal:6379",
        "token = \"***\"",
        // Every layer: the file, the environment, the flag, and a default that follows the
        // lease (the stall window, twice the 10 s lease unless it is under 10 s).
        "lease = \"10s\"",
        "max_attempts = 4",
        "instance_id = \"r7\"",
        "format = \"json\"",
        "stall_after = \"20s\"",
    ] {
        assert!(text.contains(shown), "{shown} in {text}");
    }
    // A bad configuration exits 2 with its one line, as `run` would.
    assert_config_error(
        &relay(
            &["config"],
            &[
                ("DATABASE_URL", "postgres://h/db"),
                ("OUTBOX__LOG__FORMAT", "xml"),
            ],
        ),
        "log.format",
    );
}

#[test]
fn secrets_come_from_files_and_a_value_beside_its_file_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let url = dir.path().join("database-url");
    std::fs::write(&url, "postgres://app:fromfile@db.internal/app\n").expect("write");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken-from-file\n").expect("write");
    let (url, token) = (url.display().to_string(), token.display().to_string());
    let out = relay(
        &["config"],
        &[
            ("DATABASE_URL_FILE", url.as_str()),
            ("OUTBOX__ADMIN__TOKEN_FILE", token.as_str()),
        ],
    );
    let text = succeeded(&out);
    assert!(
        text.contains("postgres://app:***@db.internal/app\""),
        "{text}"
    );
    assert!(text.contains("token = \"***\""), "{text}");
    assert_config_error(
        &relay(
            &["config"],
            &[
                ("DATABASE_URL", "postgres://h/db"),
                ("DATABASE_URL_FILE", url.as_str()),
            ],
        ),
        "DATABASE_URL_FILE",
    );
    assert_config_error(
        &relay(
            &["config"],
            &[
                ("DATABASE_URL", "postgres://h/db"),
                ("OUTBOX__ADMIN__TOKEN_FILE", "/nowhere/token"),
            ],
        ),
        "/nowhere/token",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_reads_its_token_from_a_file_and_logs_json_lines() {
    let dir = tempfile::tempdir().expect("dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "t0ken-from-file\n").expect("write");
    let token = token.display().to_string();
    let Bundle {
        db,
        redis: _redis,
        relay,
    } = setup(
        "json-logs",
        &[
            ("OUTBOX__ADMIN__TOKEN_FILE", &token),
            ("OUTBOX__LOG__FORMAT", "json"),
        ],
    )
    .await;
    let http = relay.http();
    assert_eq!(http.get("/api/v1/stats").status, 401);
    assert_eq!(
        http.bearer("t0ken-from-file").get("/api/v1/stats").status,
        200
    );
    // An event published, so that the log has lines from inside the relay's work.
    db.exec("INSERT INTO outbox (topic, payload) VALUES ('logged', '{}')")
        .await;
    http.wait_metric(
        "outbox_events_published_total{topic=\"logged\"}",
        |n| n >= 1.0,
        std::time::Duration::from_secs(20),
    )
    .await;
    let log = relay.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "{log}");
    let mut with_fields = 0;
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(v[field].is_string(), "{field} in {line}");
        }
        let own = v.as_object().map_or(0, |o| {
            o.keys()
                .filter(|k| {
                    !["timestamp", "level", "target", "message", "spans"].contains(&k.as_str())
                })
                .count()
        });
        with_fields += usize::from(own > 0);
    }
    assert!(
        with_fields > 0,
        "the events' own fields are at the top level: {log}"
    );
}

/// `outbox-relay migrate` with `extra` flags against `url`, its stderr in a log file.
fn migrate_logged(name: &str, url: &str, extra: &[&str]) -> Logged {
    let mut cmd = Command::new(BIN);
    cmd.arg("migrate")
        .args(extra)
        .env_clear()
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info");
    let log = std::env::temp_dir().join(format!(
        "migrate-{name}-{}.log",
        uuid::Uuid::new_v4().simple()
    ));
    Logged::spawn(cmd, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_waits_for_a_postgres_that_starts_late_one_line_per_try() {
    let pg = OwnPostgres::start();
    pg.stop();
    let mut migrate = migrate_logged("late", &pg.url(), &[]);
    // It had its chance and failed at least twice before the server comes up.
    eventually(Duration::from_secs(20), "two failed tries", || async {
        match migrate.log().matches("migrate tries again").count() {
            n if n >= 2 => Ok(()),
            n => Err(format!("{n} tries:\n{}", migrate.log())),
        }
    })
    .await;
    pg.restart();
    assert_eq!(
        migrate.wait_exit(Duration::from_secs(60)),
        Some(0),
        "{}",
        migrate.log()
    );
    let log = migrate.log();
    let tries = log.matches("migrate tries again").count();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("migrate tries again"))
            .count(),
        tries,
        "one line per try: {log}"
    );
    assert!(log.contains("migrations up to date"), "{log}");
    let db = TestDb::at(&pg.url());
    assert!(
        db.scalar("SELECT count(*) FROM __diesel_schema_migrations")
            .await
            > 10
    );
}

#[test]
fn migrate_gives_up_after_its_wait_and_wait_0s_tries_once() {
    // Nobody listens there: the port of a listener just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let mut waited = migrate_logged("gives-up", &url, &["--wait", "2s"]);
    assert_eq!(waited.wait_exit(Duration::from_secs(30)), Some(1));
    let log = waited.log();
    assert!(
        log.matches("migrate tries again").count() >= 2,
        "it tried again within its wait: {log}"
    );
    assert!(log.contains("cannot connect to postgres"), "{log}");
    let mut once = migrate_logged("once", &url, &["--wait", "0s"]);
    assert_eq!(once.wait_exit(Duration::from_secs(30)), Some(1));
    let log = once.log();
    assert!(!log.contains("migrate tries again"), "{log}");
    assert!(log.contains("cannot connect to postgres"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_role_granted_by_migrate_relays_and_cannot_change_the_schema() {
    let pg = OwnPostgres::start();
    let admin = TestDb::at(&pg.url());
    // Unknown role: the migration fails as a whole, naming the setting.
    let out = relay(
        &["migrate"],
        &[
            ("DATABASE_URL", &pg.url()),
            ("OUTBOX__DATABASE__RUNTIME_ROLE", "outbox_runtime"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("database.runtime_role outbox_runtime")
            && stderr.contains("does not exist"),
        "{stderr}"
    );
    assert_eq!(
        admin
            .scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'")
            .await,
        0,
        "nothing half-migrated"
    );

    admin.exec("CREATE ROLE outbox_runtime LOGIN").await;
    succeeded(&relay(
        &["migrate"],
        &[
            ("DATABASE_URL", &pg.url()),
            ("OUTBOX__DATABASE__RUNTIME_ROLE", "outbox_runtime"),
        ],
    ));
    let runtime_url = pg.url().replace("postgres@", "outbox_runtime@");
    let runtime = TestDb::at(&runtime_url);
    let refused = runtime.try_exec("CREATE TABLE outbox_mine (id int)").await;
    assert!(
        refused.is_err_and(|e| e.contains("permission denied")),
        "the runtime role changes no schema"
    );
    let redis = TestRedis::shared();
    let mut env = base_env(&admin, &redis);
    env.retain(|(k, _)| k != "DATABASE_URL");
    env.push(("DATABASE_URL".into(), runtime_url));
    env.push(("OUTBOX__RETENTION__PUBLISHED_FOR".into(), "0s".into()));
    let relay = RelayProc::spawn("runtime-role", &env);
    relay.wait_ready(Duration::from_secs(20)).await;
    insert_events(&admin, Events::varied().n(1..=40).topics(2).keys(4)).await;
    eventually(Duration::from_secs(30), "published and deleted", || async {
        match admin.scalar("SELECT count(*) FROM outbox").await {
            0 => Ok(()),
            n => Err(format!("{n} rows left")),
        }
    })
    .await;
    assert_eq!(redis.xlen("t0").await + redis.xlen("t1").await, 40);
}
