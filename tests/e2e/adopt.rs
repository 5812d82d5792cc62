//! Adopted tables (contract section 12): an existing outbox table, Debezium's layout or a
//! team's own, published by the relay with every row a committing transaction inserted (also
//! rows it deleted again), nothing from before `migrate`, nothing rolled back; bad rows refused
//! naming the column; `run` refused while the settings and what `migrate` prepared differ; a
//! `migrate` without the configuration keeps a table adopted, only `--release` releases it;
//! upserts publish only what they inserted; a replay resends adopted events; the `migrate` of
//! an upgrade makes a copy function again.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Output};
use std::time::Duration;

use diesel_async::SimpleAsyncConnection;

use crate::support::*;

/// Debezium's outbox table, as its documentation creates it.
const DEBEZIUM_TABLE: &str = "CREATE TABLE outboxevent (
    id uuid PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb
)";

/// The `[[tables]]` entry of that table, routed as Debezium's router does by default.
const DEBEZIUM_ENTRY: &str = r#"
[[tables]]
name = "public.outboxevent"
id = "id"
topic = "aggregatetype"
topic_format = "outbox.event.{}"
key = "aggregateid"
payload = "payload"
headers = { type = "type" }
"#;

/// The admin token of the relay whose pages are read.
const ADMIN: &str = "adopt-admin-token-0123456789";

/// A database with Debezium's table adopted by `migrate`, its Redis, the relays' settings and
/// the configuration file (kept as long as `_dir`).
struct Adopted {
    db: TestDb,
    redis: TestRedis,
    env: Vec<(String, String)>,
    config: String,
    _dir: tempfile::TempDir,
}

impl Adopted {
    async fn debezium() -> Adopted {
        let db = TestDb::new().await;
        let redis = TestRedis::shared();
        let env = base_env(&db, &redis);
        db.exec(DEBEZIUM_TABLE).await;
        let (_dir, config) = config_file(DEBEZIUM_ENTRY);
        migrate(&config, &env);
        Adopted {
            db,
            redis,
            env,
            config,
            _dir,
        }
    }
}

/// `outbox-relay <command>` with `env` and the configuration at `config`, to its end.
fn relay_command(command: &str, config: &str, env: &[(String, String)]) -> Output {
    relay_command_with(&[command], config, env)
}

/// [`relay_command`] with arguments after the command.
fn relay_command_with(args: &[&str], config: &str, env: &[(String, String)]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").expect("PATH"))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("OUTBOX_CONFIG", config)
        .env("OUTBOX__ADMIN__ADDR", "127.0.0.1:0")
        .output()
        .expect("run outbox-relay")
}

/// `migrate` with `config`, which must succeed.
fn migrate(config: &str, env: &[(String, String)]) {
    let out = relay_command("migrate", config, env);
    assert_eq!(
        out.status.code(),
        Some(0),
        "migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `run` with `config`, which must exit 2 with one line containing each of `words`.
fn run_refused(config: &str, env: &[(String, String)], words: &[&str]) {
    let out = relay_command("run", config, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "run: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "names {word}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_debezium_table_is_published_row_by_row_with_rows_deleted_by_their_own_transaction() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let env = base_env(&db, &redis);
    db.exec(DEBEZIUM_TABLE).await;
    // Rows from before the adoption are not published.
    db.exec(
        "INSERT INTO outboxevent SELECT gen_random_uuid(), 'order', 'o1', 'Old', '{\"old\": true}'
         FROM generate_series(1, 5)",
    )
    .await;
    let (_dir, config) = config_file(DEBEZIUM_ENTRY);
    migrate(&config, &env);

    // Producers: each row's payload carries its place in its key's order (`n`).
    let mut conn = db.conn().await;
    let mut committed: Vec<(String, String, String, u32)> = Vec::new(); // (type, key, id, n)
    let mut next_n: HashMap<String, u32> = HashMap::new();
    let mut row = |aggregate: &str, key: &str| {
        let n = next_n.entry(format!("{aggregate}/{key}")).or_insert(0);
        *n += 1;
        let id = uuid::Uuid::new_v4().to_string();
        let values = format!(
            "('{id}', '{aggregate}', '{key}', '{aggregate}Changed', '{{\"n\": {n}, \"key\": \"{key}\"}}')"
        );
        (id, *n, values)
    };
    for round in 0..20 {
        let mut values = Vec::new();
        let mut rows = Vec::new();
        for k in 0..4 {
            let aggregate = if k % 2 == 0 { "order" } else { "customer" };
            let key = format!("{aggregate}-{}", (round + k) % 3);
            let (id, n, v) = row(aggregate, &key);
            values.push(v);
            rows.push((aggregate.to_string(), key, id, n));
        }
        let insert = format!("INSERT INTO outboxevent VALUES {}", values.join(", "));
        if round % 2 == 0 {
            // A plain multi-row insert: the rows stay in the table.
            conn.batch_execute(&insert).await.expect("insert");
        } else {
            // Debezium's pattern: insert and delete in one transaction, the table stays empty.
            let ids: Vec<String> = rows.iter().map(|r| format!("'{}'", r.2)).collect();
            conn.batch_execute(&format!(
                "BEGIN; {insert}; DELETE FROM outboxevent WHERE id IN ({}); COMMIT;",
                ids.join(", ")
            ))
            .await
            .expect("insert then delete");
        }
        committed.extend(rows);
    }
    // A rolled-back transaction publishes nothing.
    let mut rolled_back = Vec::new();
    for _ in 0..3 {
        let (id, _, v) = row("order", "rolled-back");
        conn.batch_execute(&format!(
            "BEGIN; INSERT INTO outboxevent VALUES {v}; ROLLBACK;"
        ))
        .await
        .expect("rolled back");
        rolled_back.push(id);
    }

    let mut env = env;
    env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN.into()));
    let relay = RelayProc::spawn_with_config("r1", &env, &config);
    db.wait_until_published(Duration::from_secs(60)).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outboxevent").await,
        5 + 40,
        "the table's own rows are untouched"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE source_table = 'public.outboxevent'")
            .await,
        80,
        "each committed insert copied once, with the table it came from"
    );
    let mut seen = HashSet::new();
    let mut last_n: HashMap<String, u32> = HashMap::new();
    for aggregate in ["order", "customer"] {
        let topic = format!("outbox.event.{aggregate}");
        for entry in redis.entries(&topic).await {
            let id = entry["id"].clone();
            assert!(seen.insert(id.clone()), "{id} published twice");
            let expected = committed
                .iter()
                .find(|c| c.2 == id)
                .unwrap_or_else(|| panic!("{id} was never committed"));
            assert_eq!(entry["topic"], topic);
            assert_eq!(entry.get("key"), Some(&expected.1));
            let headers: serde_json::Value =
                serde_json::from_str(&entry["headers"]).expect("headers are JSON");
            assert_eq!(headers["type"], format!("{aggregate}Changed"));
            let payload: serde_json::Value =
                serde_json::from_str(&entry["payload"]).expect("payload is JSON");
            assert_eq!(payload["n"], expected.3, "payload as written");
            let last = last_n.insert(expected.1.clone(), expected.3).unwrap_or(0);
            assert!(expected.3 > last, "key {} out of order", expected.1);
        }
    }
    assert_eq!(seen.len(), committed.len(), "every committed row published");
    assert!(rolled_back.iter().all(|id| !seen.contains(id)));
    // The admin shows where each came from, in the API and on the event's page.
    let deleted_again = &committed[4].2;
    let admin = relay.http().bearer(ADMIN);
    let api = admin.get(&format!("/api/v1/events/{deleted_again}"));
    assert_eq!(
        api.json["source_table"], "public.outboxevent",
        "{}",
        api.body
    );
    assert_eq!(api.json["status"], "published");
    let (session, _) = relay.login(ADMIN);
    let page = session.get(&format!("/events/{deleted_again}"));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("public.outboxevent"), "{}", page.body);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bigint_id_and_a_text_payload_get_a_stable_id_and_their_json() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let env = base_env(&db, &redis);
    db.exec("CREATE TABLE events (id bigserial PRIMARY KEY, kind text NOT NULL, body text)")
        .await;
    let (_dir, config) = config_file(
        r#"
[[tables]]
name = "events"
id = "id"
topic = "kind"
payload = "body"
"#,
    );
    migrate(&config, &env);
    db.exec(
        "INSERT INTO events (kind, body) VALUES ('note', '{\"a\": 1}'), ('note', 'hello'), ('note', '12')",
    )
    .await;
    let relay = RelayProc::spawn_with_config("r1", &env, &config);
    db.wait_published("note", 3, Duration::from_secs(30)).await;
    let entries = redis.entries("note").await;
    let payloads: Vec<&str> = entries.iter().map(|e| e["payload"].as_str()).collect();
    assert_eq!(payloads, [r#"{"a": 1}"#, r#""hello""#, "12"]);
    for (n, entry) in entries.iter().enumerate() {
        let expected = db
            .text(&format!(
                "outbox_derived_uuid('public.events', '{}')",
                n + 1
            ))
            .await;
        assert_eq!(
            entry["id"], expected,
            "the id is derived from table and value"
        );
    }
    // The same value always gives the same id, and another table another one.
    assert_eq!(
        db.text("outbox_derived_uuid('public.events', '1')").await,
        entries[0]["id"]
    );
    assert_ne!(
        db.text("outbox_derived_uuid('public.other', '1')").await,
        entries[0]["id"]
    );
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inserts_fail_the_producer_naming_the_column_and_write_nothing() {
    let Adopted { db, _dir, .. } = Adopted::debezium().await;
    let mut conn = db.conn().await;
    let cases = [
        (
            "INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', NULL)",
            "payload",
        ),
        (
            "INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', '{}'), \
             (gen_random_uuid(), 'bad topic', 'o1', 'T', '{}')",
            "aggregatetype",
        ),
    ];
    for (sql, column) in cases {
        let error = conn
            .batch_execute(sql)
            .await
            .expect_err("the insert is refused")
            .to_string();
        assert!(error.contains(column), "names {column}: {error}");
        assert!(error.contains("outboxevent"), "names the table: {error}");
    }
    assert_eq!(db.scalar("SELECT count(*) FROM outboxevent").await, 0);
    assert_eq!(db.scalar("SELECT count(*) FROM outbox").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_producer_role_with_rights_on_its_own_table_only_can_insert() {
    let Adopted { db, _dir, .. } = Adopted::debezium().await;
    let role = format!("{}_app", db.name);
    db.exec(&format!(
        "CREATE ROLE {role} NOLOGIN; GRANT USAGE ON SCHEMA public TO {role};
         GRANT INSERT, DELETE, SELECT ON outboxevent TO {role}"
    ))
    .await;
    let mut conn = db.conn().await;
    let inserted = conn
        .batch_execute(&format!(
            "BEGIN; SET LOCAL ROLE {role};
             INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', '{{}}');
             COMMIT;"
        ))
        .await;
    let denied = conn
        .batch_execute(&format!(
            "BEGIN; SET LOCAL ROLE {role}; SELECT count(*) FROM outbox; COMMIT;"
        ))
        .await;
    let _ = conn.batch_execute("ROLLBACK").await;
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
    inserted.expect("the producer's insert needs no grant on outbox");
    assert!(denied.is_err(), "the role has no rights on outbox itself");
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE source_table = 'public.outboxevent'")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_settings_that_migrate_did_not_prepare_and_only_release_stops_publishing() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let env = base_env(&db, &redis);
    db.exec(DEBEZIUM_TABLE).await;
    let (_dir, adopted) = config_file(DEBEZIUM_ENTRY);
    run_refused(
        &adopted,
        &env,
        &["public.outboxevent", "outbox-relay migrate"],
    );
    migrate(&adopted, &env);
    // Another mapping for the same table is drift too.
    let (_dir2, changed) = config_file(&DEBEZIUM_ENTRY.replace("outbox.event.{}", "ev.{}"));
    run_refused(
        &changed,
        &env,
        &["public.outboxevent", "outbox-relay migrate"],
    );
    // Dropped from the settings: `migrate` keeps it adopted, says so, and `run` is refused
    // until it is put back or released.
    let (_dir3, none) = config_file("");
    let kept = relay_command("migrate", &none, &env);
    let log =
        String::from_utf8_lossy(&kept.stdout).to_string() + &String::from_utf8_lossy(&kept.stderr);
    assert_eq!(kept.status.code(), Some(0), "migrate: {log}");
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("adopted table kept"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning line: {log}");
    assert!(
        warnings[0].contains("public.outboxevent")
            && warnings[0].contains("outbox-relay migrate --release public.outboxevent"),
        "{log}"
    );
    run_refused(
        &none,
        &env,
        &["public.outboxevent", "migrate --release public.outboxevent"],
    );
    db.exec("INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', '{}')")
        .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox").await,
        1,
        "still copied"
    );
    // Releasing a table that is still listed is refused, naming it.
    let listed = relay_command_with(
        &["migrate", "--release", "public.outboxevent"],
        &adopted,
        &env,
    );
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("public.outboxevent") && stderr.contains("[[tables]]"),
        "{stderr}"
    );
    // The explicit release stops the copy and removes the trigger and its function.
    let released = relay_command_with(&["migrate", "--release", "public.outboxevent"], &none, &env);
    assert_eq!(
        released.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&released.stderr)
    );
    db.exec("INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', '{}')")
        .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox").await,
        1,
        "no longer copied"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_relay_adopt'")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM pg_proc WHERE proname LIKE 'outbox_adopt_%'")
            .await,
        0
    );
    assert_eq!(db.scalar("SELECT count(*) FROM outboxevent").await, 2);
    // A release run again (an init container restarted) finds nothing to release and succeeds.
    let again = relay_command_with(&["migrate", "--release", "public.outboxevent"], &none, &env);
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // And `run` without the table is no longer refused: it serves and is stopped.
    let relay = RelayProc::spawn_with_config("r1", &env, &none);
    relay.wait_ready(Duration::from_secs(30)).await;
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_migrate_without_the_configuration_keeps_an_adopted_table_published() {
    let adopted = Adopted::debezium().await;
    // What the kit's init container did: `migrate` with no configuration at all.
    let bare = Command::new(BIN)
        .arg("migrate")
        .env_clear()
        .env("PATH", std::env::var("PATH").expect("PATH"))
        .envs(adopted.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run outbox-relay migrate");
    assert_eq!(
        bare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    adopted
        .db
        .exec(
            "INSERT INTO outboxevent SELECT gen_random_uuid(), 'order', 'o' || g, 'T', '{}'
             FROM generate_series(1, 25) g",
        )
        .await;
    let relay = RelayProc::spawn_with_config("r1", &adopted.env, &adopted.config);
    adopted
        .db
        .wait_published("outbox.event.order", 25, Duration::from_secs(60))
        .await;
    assert_eq!(
        adopted.redis.entries("outbox.event.order").await.len(),
        25,
        "every row inserted after the bare migrate is published"
    );
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn three_relays_sigkilled_in_turn_publish_an_adopted_table_once_in_key_order() {
    let Adopted {
        db,
        redis,
        mut env,
        config,
        _dir,
    } = Adopted::debezium().await;
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "100".into()));
    let mut relays: Vec<RelayProc> = (0..3)
        .map(|i| RelayProc::spawn_with_config(&format!("adopt-{i}-0"), &env, &config))
        .collect();
    // Debezium's insert-then-delete, 40 transactions of 100 rows over 20 keys of 2 types; each
    // payload carries its place in its key's order.
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 100;
    let producer = tokio::spawn({
        let db = TestDb::at(&db.url);
        async move {
            let mut conn = db.conn().await;
            for n in 1..=ROUNDS {
                let values: Vec<String> = (0..PER_ROUND)
                    .map(|i| {
                        let aggregate = if i % 2 == 0 { "order" } else { "customer" };
                        format!(
                            "(gen_random_uuid(), '{aggregate}', 'k{}', 'T', '{{\"n\": {n}, \"i\": {i}}}')",
                            i % 20
                        )
                    })
                    .collect();
                conn.batch_execute(&format!(
                    "BEGIN; INSERT INTO outboxevent VALUES {}; DELETE FROM outboxevent; COMMIT;",
                    values.join(", ")
                ))
                .await
                .expect("produce");
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
    });
    let mut kills = 0;
    while !producer.is_finished() || kills < 6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let victim = kills % relays.len();
        relays[victim].kill9();
        kills += 1;
        relays[victim] =
            RelayProc::spawn_with_config(&format!("adopt-{victim}-{kills}"), &env, &config);
        assert!(kills < 400, "producer never finished");
    }
    producer.await.expect("producer");
    db.wait_until_published(Duration::from_secs(90)).await;
    let mut seen = HashSet::new();
    let mut last: HashMap<String, (u64, u64)> = HashMap::new();
    for aggregate in ["order", "customer"] {
        for entry in redis.entries(&format!("outbox.event.{aggregate}")).await {
            assert!(seen.insert(entry["id"].clone()), "{} twice", entry["id"]);
            let payload: serde_json::Value =
                serde_json::from_str(&entry["payload"]).expect("payload");
            let place = (
                payload["n"].as_u64().expect("n"),
                payload["i"].as_u64().expect("i"),
            );
            let key = entry["key"].clone();
            if let Some(before) = last.insert(key.clone(), place) {
                assert!(place > before, "key {key}: {place:?} after {before:?}");
            }
        }
    }
    assert_eq!(seen.len(), ROUNDS * PER_ROUND, "every committed row once");
    assert_eq!(db.scalar("SELECT count(*) FROM outboxevent").await, 0);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0,
        "crashes are not the events' fault"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_teams_own_table_on_a_partitioned_topic_keeps_its_time_headers_and_key_partitions() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__TOPICS".into(), "shop.orders:4".into()));
    db.exec(
        "CREATE SCHEMA shop;
         CREATE TABLE shop.events (
             event_id uuid PRIMARY KEY, stream text NOT NULL, customer text,
             body json NOT NULL, occurred_at timestamptz NOT NULL,
             kind text NOT NULL, trace text)",
    )
    .await;
    let (_dir, config) = config_file(
        r#"
[[tables]]
name = "shop.events"
id = "event_id"
topic = "stream"
topic_format = "shop.{}"
key = "customer"
payload = "body"
created_at = "occurred_at"
headers = { type = "kind", traceparent = "trace" }
"#,
    );
    migrate(&config, &env);
    // 200 events over 12 customers, each an hour ago plus its place; every fifth unkeyed and
    // without a trace.
    db.exec(
        "INSERT INTO shop.events
         SELECT gen_random_uuid(), 'orders', CASE WHEN i % 5 <> 0 THEN 'c' || (i % 12) END,
                json_build_object('i', i), timestamptz '2026-01-02 03:04:05+00' + i * interval '1 ms',
                'OrderPlaced',
                CASE WHEN i % 5 <> 0 THEN '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' END
         FROM generate_series(1, 200) AS i ORDER BY i",
    )
    .await;
    let relay = RelayProc::spawn_with_config("r1", &env, &config);
    db.wait_until_published(Duration::from_secs(60)).await;
    let mut seen = 0;
    for p in 0..4u32 {
        let entries = redis.entries(&format!("shop.orders:{p}")).await;
        let mut last_i: HashMap<String, u64> = HashMap::new();
        for e in &entries {
            seen += 1;
            let payload: serde_json::Value = serde_json::from_str(&e["payload"]).expect("json");
            let i = payload["i"].as_u64().expect("i");
            assert_eq!(
                e["created_at"],
                format!("2026-01-02T03:04:05.{:03}000Z", i),
                "created_at from the mapped column"
            );
            let headers: serde_json::Value = serde_json::from_str(&e["headers"]).expect("json");
            assert_eq!(headers["type"], "OrderPlaced");
            match e.get("key") {
                Some(key) => {
                    assert_eq!(outbox_core::partition::for_key(key, 4), p, "key {key}");
                    assert_eq!(key, &format!("c{}", i % 12));
                    assert!(headers["traceparent"].is_string(), "{headers}");
                    if let Some(before) = last_i.insert(key.clone(), i) {
                        assert!(i > before, "key {key}: {i} after {before}");
                    }
                }
                None => {
                    assert_eq!(i % 5, 0);
                    assert!(
                        headers.get("traceparent").is_none(),
                        "null headers left out"
                    );
                }
            }
        }
    }
    assert_eq!(seen, 200);
    drop(relay);
}

/// An upsert publishes the rows it inserted, not those it updated or skipped; a replay of an
/// adopted topic sends its events again, in order, from the copies in `outbox`, even once the
/// table's own rows are gone.
#[tokio::test(flavor = "multi_thread")]
async fn upserts_publish_what_they_inserted_and_a_replay_resends_adopted_events() {
    let Adopted {
        db,
        redis,
        env,
        config,
        _dir,
    } = Adopted::debezium().await;
    let [a, b, c] = [0; 3].map(|_| uuid::Uuid::new_v4());
    let row = |id: uuid::Uuid, n: u32| {
        format!("('{id}', 'order', 'o1', 'OrderChanged', '{{\"n\": {n}}}')")
    };
    db.exec(&format!("INSERT INTO outboxevent VALUES {}", row(a, 1)))
        .await;
    db.exec(&format!(
        "INSERT INTO outboxevent VALUES {}, {} ON CONFLICT (id) DO NOTHING",
        row(a, 99),
        row(b, 2)
    ))
    .await;
    db.exec(&format!(
        "INSERT INTO outboxevent VALUES {}, {} ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload",
        row(a, 98),
        row(c, 3)
    ))
    .await;
    let relay = RelayProc::spawn_with_config("r1", &env, &config);
    db.wait_until_published(Duration::from_secs(60)).await;
    let published = |entries: &[HashMap<String, String>]| -> Vec<(String, String)> {
        entries
            .iter()
            .map(|e| (e["id"].clone(), e["payload"].clone()))
            .collect()
    };
    let want: Vec<(String, String)> = [(a, 1), (b, 2), (c, 3)]
        .iter()
        .map(|(id, n)| (id.to_string(), format!("{{\"n\": {n}}}")))
        .collect();
    let entries = redis.entries("outbox.event.order").await;
    assert_eq!(
        published(&entries),
        want,
        "inserted rows once, in order; no update"
    );

    // The producer's table emptied (Debezium's own clean-up): the copies replay.
    db.exec("DELETE FROM outboxevent").await;
    let out = relay_command_with(
        &["replay", "outbox.event.order", "--since", "1h"],
        &config,
        &env,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"replayed":3}"#
    );
    eventually(Duration::from_secs(30), "the replayed entries", || async {
        redis.xlen("outbox.event.order").await >= 6
    })
    .await;
    relay.wait_for_a_claim_cycle(Duration::from_secs(10)).await;
    let entries = redis.entries("outbox.event.order").await;
    assert_eq!(entries.len(), 6, "each event replayed once");
    assert_eq!(published(&entries[3..]), want, "the replay, in order");
}

/// `park_on_dead` holds an adopted table's key like any other: the rows after a dead one wait
/// (no attempt spent) until it is discarded, then go out in their order.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_row_of_an_adopted_table_parks_its_key_until_discarded() {
    let Adopted {
        db,
        redis,
        mut env,
        _dir,
        ..
    } = Adopted::debezium().await;
    let (_parking, config) = config_file(&format!(
        "{DEBEZIUM_ENTRY}
[redis]
max_payload_bytes = 2000

[retry]
max_attempts = 1

[[topics]]
name = \"outbox.event.order\"
park_on_dead = true
"
    ));
    db.exec(
        "INSERT INTO outboxevent
         SELECT gen_random_uuid(), 'order', 'o' || k, 'OrderChanged',
                jsonb_build_object('n', n,
                    'pad', CASE WHEN k = 1 AND n = 3 THEN repeat('x', 5000) ELSE '' END)
         FROM generate_series(1, 6) AS n, generate_series(0, 2) AS k ORDER BY n, k",
    )
    .await;
    env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN.into()));
    let relay = RelayProc::spawn_with_config("r1", &env, &config);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        14,
        Duration::from_secs(60),
    )
    .await;
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL",
        1,
        Duration::from_secs(30),
    )
    .await;
    relay.wait_for_a_claim_cycle(Duration::from_secs(10)).await;
    let admin = relay.http().bearer(ADMIN);
    let parked = admin.get("/api/v1/topics/outbox.event.order/parked");
    assert_eq!(parked.status, 200, "{}", parked.body);
    assert_eq!(parked.json["keys"][0]["key"], "o1", "{}", parked.body);
    assert_eq!(parked.json["keys"][0]["held"], 3, "{}", parked.body);
    let order = |entries: &[HashMap<String, String>]| -> Vec<i64> {
        entries
            .iter()
            .filter(|e| e["key"] == "o1")
            .map(|e| {
                let payload: serde_json::Value =
                    serde_json::from_str(&e["payload"]).expect("payload");
                payload["n"].as_i64().expect("n")
            })
            .collect()
    };
    assert_eq!(order(&redis.entries("outbox.event.order").await), [1, 2]);
    let dead = parked.json["keys"][0]["dead_id"]
        .as_str()
        .expect("dead id")
        .to_string();
    let res = admin.post(&format!("/api/v1/events/{dead}/discard"), None);
    assert_eq!(res.status, 200, "{}", res.body);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        17,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        order(&redis.entries("outbox.event.order").await),
        [1, 2, 4, 5, 6]
    );
}

/// A database adopted before the one-statement copy and the NOTIFY trigger's `WHEN` clause
/// (migration 15) gets both from the `migrate` of the upgrade, and `run` is not refused for it.
#[tokio::test(flavor = "multi_thread")]
async fn the_upgrading_migrate_makes_an_adopted_tables_copy_function_again() {
    let Adopted {
        db,
        env,
        config,
        _dir,
        ..
    } = Adopted::debezium().await;
    let function = db
        .text("SELECT function_name FROM outbox_adopted_tables")
        .await;
    // The database as the release before migration 15 left it: that migration reverted, and
    // the copy function of that release (a validation query, then the copy).
    db.exec(include_str!(
        "../../migrations/2026-12-13-000001_cheaper_producer_triggers/down.sql"
    ))
    .await;
    db.exec(&format!(
        "DELETE FROM __diesel_schema_migrations WHERE version = '20261213000001';
         DROP FUNCTION outbox_refuse_adopted_row(text, text, text, anyelement);
         CREATE OR REPLACE FUNCTION \"{function}\"() RETURNS trigger LANGUAGE plpgsql AS $f$
         BEGIN
             PERFORM 1 FROM outbox_adopted_new AS r WHERE r.payload IS NULL;
             INSERT INTO outbox (id, topic, payload, partition_key, source_table)
             SELECT r.id, 'outbox.event.' || r.aggregatetype, r.payload, r.aggregateid,
                    'public.outboxevent'
             FROM outbox_adopted_new AS r;
             RETURN NULL;
         END $f$"
    ))
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_notify_insert' AND tgqual IS NULL")
            .await,
        1,
        "the old NOTIFY trigger, without WHEN"
    );

    migrate(&config, &env);
    let body = db
        .text(&format!(
            "SELECT pg_get_functiondef('\"{function}\"'::regproc)"
        ))
        .await;
    assert!(
        body.contains("outbox_refuse_adopted_row"),
        "the copy function is made again: {body}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_notify_insert' AND tgqual IS NOT NULL")
            .await,
        1,
        "the NOTIFY trigger has its WHEN clause"
    );
    let error = db
        .conn()
        .await
        .batch_execute(
            "INSERT INTO outboxevent VALUES (gen_random_uuid(), 'bad topic', 'o1', 'T', '{}')",
        )
        .await
        .expect_err("a bad topic is refused")
        .to_string();
    assert!(error.contains("aggregatetype"), "names the column: {error}");
    db.exec("INSERT INTO outboxevent VALUES (gen_random_uuid(), 'order', 'o1', 'T', '{}')")
        .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE topic = 'outbox.event.order'")
            .await,
        1
    );
    // The registry matches the settings again: `run` starts (and is stopped here).
    let relay = RelayProc::spawn_with_config("upgraded", &env, &config);
    db.wait_until_published(Duration::from_secs(60)).await;
    drop(relay);
}
