//! TLS to Postgres and Redis with certificates from a CA the test makes: `verify-full` and a
//! `rediss://` URL deliver everything, encrypted; a wrong host name or an unknown CA is refused
//! (not ready, one clear log line, nothing sent, no attempt spent), also for each host of a
//! URL that lists a primary and its standby; mutual TLS for Redis.

use std::time::Duration;

use redis::{ClientTlsConfig, TlsCertificates};

use crate::support::*;

/// Postgres and Redis of their own, both TLS, with certificates for `localhost` from `ca`.
struct Servers {
    pg: OwnPostgres,
    redis: OwnRedis,
}

impl Servers {
    fn start(ca: &TestCa, redis_client_ca: bool) -> Servers {
        let pg_cert = ca.server("pg", "localhost");
        let redis_cert = ca.server("redis", "localhost");
        Servers {
            pg: OwnPostgres::start_tls(&pg_cert.cert, &pg_cert.key),
            redis: OwnRedis::start_tls(&redis_cert, redis_client_ca.then_some(ca.cert.as_path())),
        }
    }

    fn pg_url(&self, host: &str, query: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?{query}",
            self.pg.port()
        )
    }
}

fn tls_env(db_url: String, redis_url: String, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("DATABASE_URL".into(), db_url),
        ("REDIS_URL".into(), redis_url),
        ("OUTBOX__RELAY__POLL_INTERVAL".into(), "200ms".into()),
        ("OUTBOX__RELAY__LEASE".into(), "5s".into()),
        ("RUST_LOG".into(), "warn,outbox_relay=info".into()),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

async fn stream_len(redis_url: &str, ca: &TestCa, client: Option<&Issued>, key: &str) -> i64 {
    let read = |p: &std::path::Path| std::fs::read(p).expect("read pem");
    let client = redis::Client::build_with_tls(
        redis_url,
        TlsCertificates {
            client_tls: client.map(|c| ClientTlsConfig {
                client_cert: read(&c.cert),
                client_key: read(&c.key),
            }),
            root_cert: Some(read(&ca.cert)),
        },
    )
    .expect("tls client");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect over tls");
    redis::cmd("XLEN")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("xlen")
}

/// Client backends other than the asking one: what reached Postgres past the handshake.
async fn sessions(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_and_rediss_deliver_everything_encrypted() {
    let ca = TestCa::new("outbox-test-ca");
    let servers = Servers::start(&ca, false);
    let root = ca.cert.display().to_string();
    let url = servers.pg_url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );
    let applied = outbox_relay::db::migrate::run_pending(&url)
        .await
        .expect("migrate over verify-full");
    assert!(applied > 0);
    let db = TestDb::at(&servers.pg.url());
    insert_events(&db, Events::varied().n(1..=300).topics(1).keys(5)).await;
    let env = tls_env(
        url,
        servers.redis.tls_url(),
        &[("OUTBOX__REDIS__CA_FILE", root.as_str())],
    );
    let relay = RelayProc::spawn("tls-ok", &env);
    relay.wait_ready(Duration::from_secs(20)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(
        stream_len(&servers.redis.tls_url(), &ca, None, "outbox:t0").await,
        300
    );
    let plain = db
        .scalar(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = 'outbox-relay' AND NOT s.ssl",
        )
        .await;
    let encrypted = db
        .scalar(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = 'outbox-relay' AND s.ssl",
        )
        .await;
    assert_eq!(plain, 0, "every relay connection is encrypted");
    assert!(encrypted > 0);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_host_name_or_an_unknown_ca_is_never_talked_to() {
    let ca = TestCa::new("outbox-test-ca");
    let stranger = TestCa::new("some-other-ca");
    let servers = Servers::start(&ca, false);
    let (root, other) = (
        ca.cert.display().to_string(),
        stranger.cert.display().to_string(),
    );
    let db = TestDb::at(&servers.pg.url());
    outbox_relay::db::migrate::run_pending(&servers.pg.url())
        .await
        .expect("migrate");
    insert_events(&db, Events::varied().n(1..=20).topics(1).keys(3)).await;
    let redis_ca = [("OUTBOX__REDIS__CA_FILE", root.as_str())];

    // The certificate names localhost; the URL says 127.0.0.1.
    let wrong_host = servers.pg_url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );
    let relay = RelayProc::spawn(
        "tls-host",
        &tls_env(wrong_host, servers.redis.tls_url(), &redis_ca),
    );
    refused(&relay, "postgres", "not valid for name").await;
    assert_eq!(sessions(&db).await, 0, "nothing got past the handshake");
    drop(relay);

    // An unknown CA, for Postgres and for Redis.
    let unknown = servers.pg_url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    );
    let relay = RelayProc::spawn(
        "tls-ca",
        &tls_env(unknown, servers.redis.tls_url(), &redis_ca),
    );
    refused(&relay, "postgres", "UnknownIssuer").await;
    drop(relay);
    let good = servers.pg_url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );
    let env = tls_env(
        good,
        servers.redis.tls_url(),
        &[("OUTBOX__REDIS__CA_FILE", other.as_str())],
    );
    let relay = RelayProc::spawn("tls-redis-ca", &env);
    refused(&relay, "redis", "UnknownIssuer").await;
    drop(relay);
    assert_eq!(db.pending().await, 20, "nothing was published");
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0,
        "a refused server is an outage, not the events' fault"
    );

    // verify-ca checks the chain, not the name: the same URL is accepted.
    let verify_ca = servers.pg_url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={root}"),
    );
    let relay = RelayProc::spawn(
        "tls-verify-ca",
        &tls_env(verify_ca, servers.redis.tls_url(), &redis_ca),
    );
    relay.wait_ready(Duration::from_secs(20)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_checks_each_host_of_a_multi_host_url_against_its_own_name() {
    let ca = TestCa::new("outbox-test-ca");
    let root = ca.cert.display().to_string();
    // The primary's certificate names 127.0.0.1, its standby's localhost.
    let primary_cert = ca.server("pg-primary", "127.0.0.1");
    let standby_cert = ca.server("pg-standby", "localhost");
    let primary = OwnPostgres::start_tls(&primary_cert.cert, &primary_cert.key);
    let standby = OwnPostgres::standby_tls(&primary, &standby_cert.cert, &standby_cert.key);
    let redis_cert = ca.server("redis", "localhost");
    let redis = OwnRedis::start_tls(&redis_cert, None);
    let redis_ca = [("OUTBOX__REDIS__CA_FILE", root.as_str())];
    let url = |first: &str, second: &str| {
        format!(
            "postgres://postgres@{first}:{},{second}:{}/postgres?target_session_attrs=read-write&sslmode=verify-full&sslrootcert={root}",
            standby.port(),
            primary.port()
        )
    };

    // Each host by the name its certificate gives: the standby is verified and passed over
    // (it does not accept writes), the primary verified by its own name.
    let good = url("localhost", "127.0.0.1");
    outbox_relay::db::migrate::run_pending(&good)
        .await
        .expect("migrate through both hosts over verify-full");
    let db = TestDb::at(&primary.url());
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(5)).await;
    let relay = RelayProc::spawn("tls-hosts", &tls_env(good, redis.tls_url(), &redis_ca));
    relay.wait_ready(Duration::from_secs(20)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(
        stream_len(&redis.tls_url(), &ca, None, "outbox:t0").await,
        50
    );
    drop(relay);

    // Each host by the other's name: both refused, nothing published.
    insert_events(&db, Events::varied().n(51..=60).topics(1).keys(5)).await;
    let swapped = url("127.0.0.1", "localhost");
    let relay = RelayProc::spawn(
        "tls-hosts-swapped",
        &tls_env(swapped, redis.tls_url(), &redis_ca),
    );
    refused(&relay, "postgres", "not valid for name").await;
    assert_eq!(db.pending().await, 10, "nothing was published");
}

/// The relay stays not ready because `server` failed its check, and its log says why.
async fn refused(relay: &RelayProc, server: &str, reason: &str) {
    let http = relay.http();
    http.wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    let (ready, log) = eventually(
        Duration::from_secs(20),
        &format!("{server} to be refused for {reason}"),
        || async {
            let ready = http.get("/readyz");
            let checked = ready.json["fresh"] == true && ready.json[server] == false;
            let log = relay.log();
            match checked && log.contains(reason) {
                true => Ok((ready, log)),
                false => Err(format!("{} / log:\n{log}", ready.body)),
            }
        },
    )
    .await;
    assert_eq!(ready.status, 503);
    if server == "postgres" {
        // The pool retries without end; the reason is said once a minute.
        let lines = log.lines().filter(|l| l.contains(reason)).count();
        assert_eq!(lines, 1, "one log line says why:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_with_mutual_tls_takes_only_a_client_with_a_certificate() {
    let ca = TestCa::new("outbox-test-ca");
    let servers = Servers::start(&ca, true);
    let client = ca.client("relay", "outbox-relay");
    let root = ca.cert.display().to_string();
    outbox_relay::db::migrate::run_pending(&servers.pg.url())
        .await
        .expect("migrate");
    let db = TestDb::at(&servers.pg.url());
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(3)).await;
    let url = servers.pg_url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={root}"),
    );

    let without = tls_env(
        url.clone(),
        servers.redis.tls_url(),
        &[("OUTBOX__REDIS__CA_FILE", root.as_str())],
    );
    let relay = RelayProc::spawn("mtls-none", &without);
    let http = relay.http();
    http.wait_metric(
        "outbox_outage_cycles_total",
        |n| n >= 1.0,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(http.status("/readyz"), 503);
    assert_eq!(db.pending().await, 50);
    drop(relay);

    let (cert, key) = (
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    let with = tls_env(
        url,
        servers.redis.tls_url(),
        &[
            ("OUTBOX__REDIS__CA_FILE", root.as_str()),
            ("OUTBOX__REDIS__CLIENT_CERT_FILE", cert.as_str()),
            ("OUTBOX__REDIS__CLIENT_KEY_FILE", key.as_str()),
        ],
    );
    let relay = RelayProc::spawn("mtls-cert", &with);
    relay.wait_ready(Duration::from_secs(20)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(
        stream_len(&servers.redis.tls_url(), &ca, Some(&client), "outbox:t0").await,
        50
    );
}
