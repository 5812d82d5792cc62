//! The consumer's connection to Redis: it outlives a restart that lost its group, and reads
//! over mutual TLS.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_outlives_a_redis_restart_that_lost_its_group() {
    let mut server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    // The consumer reaches the server through a proxy, which counts its attempts.
    let proxy = Proxy::start(server.port).await;
    let through = TestRedis {
        url: proxy.url(),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    let first = xadd_event(&redis, "outage", None, &serde_json::json!({"n": 1})).await;
    let seen: Arc<Mutex<Vec<uuid::Uuid>>> = Arc::default();
    let seen_changed = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&through, "outage", "solo")).expect("config");
    let run = tokio::spawn({
        let (seen, seen_changed, stop) = (seen.clone(), seen_changed.clone(), stop.clone());
        async move {
            consumer
                .run(
                    |entry: Entry| {
                        let (seen, seen_changed) = (seen.clone(), seen_changed.clone());
                        async move {
                            seen.lock().expect("lock").push(entry.id);
                            seen_changed.notify_one();
                            Ok::<(), HandlerError>(())
                        }
                    },
                    async move { stop.notified().await },
                )
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), seen_changed.notified())
        .await
        .expect("the first entry handled");
    // Down for several failed attempts; back without its data (no persistence): the stream
    // and the group are gone.
    server.stop();
    let tried = proxy.connections();
    eventually(
        Duration::from_secs(30),
        "the consumer to try Redis again while it is down",
        || async { proxy.connections() >= tried + 2 },
    )
    .await;
    server.restart();
    let second = xadd_event(&redis, "outage", None, &serde_json::json!({"n": 2})).await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.lock().expect("lock").len() < 2 {
            seen_changed.notified().await;
        }
    })
    .await
    .expect("the entry written after the restart handled");
    stop.notify_one();
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops on shutdown")
        .expect("no panic");
    assert_eq!(*seen.lock().expect("lock"), vec![first, second]);
    assert_eq!(stats.handled, 2);
}

/// A Redis client over TLS with `ca` trusted and `client` as its certificate.
async fn tls_conn(url: &str, ca: &TestCa, client: &Issued) -> redis::aio::MultiplexedConnection {
    let read = |p: &std::path::Path| std::fs::read(p).expect("read a test certificate");
    let certs = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read(&client.cert),
            client_key: read(&client.key),
        }),
        root_cert: Some(read(&ca.cert)),
    };
    redis::Client::build_with_tls(url, certs)
        .expect("tls client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect over tls")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_reads_over_mutual_tls_with_its_ca_and_client_certificate() {
    let ca = TestCa::new("consumer-test-ca");
    let server = OwnRedis::start_tls(&ca.server("redis", "localhost"), Some(&ca.cert));
    let client = ca.client("consumer", "outbox-consumer");
    let url = server.tls_url();
    let config = ConsumerConfig::new(&url, "secure", GROUP)
        .consumer("tls")
        .block(Duration::from_millis(200))
        .tls_files(
            Some(ca.cert.clone()),
            Some(client.cert.clone()),
            Some(client.key.clone()),
        );
    // Also installs the process's rustls crypto provider, which the test's client needs.
    let consumer = Consumer::new(config).expect("config");
    let mut conn = tls_conn(&url, &ca, &client).await;
    let id = uuid::Uuid::new_v4();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        "outbox:secure",
        "*",
        &[
            ("id", id.to_string().as_str()),
            ("topic", "secure"),
            ("payload", "{}"),
            ("headers", "{}"),
            ("created_at", "2026-12-02T13:57:01.123456Z"),
        ],
    )
    .await
    .expect("xadd over tls");
    let seen = Arc::new(Mutex::new(None));
    let stop = Arc::new(tokio::sync::Notify::new());
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                *seen.lock().expect("lock") = Some(entry.id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the entry read over TLS");
    assert_eq!(*seen.lock().expect("lock"), Some(id));
    assert_eq!(stats.handled, 1);
}
