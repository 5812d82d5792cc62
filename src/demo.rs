//! `outbox-relay demo`: one command, no set-up. Creates its database if missing, migrates,
//! and runs the relay with a sample producer: several topics, partition keys, and a few
//! poison events (their topic's stream key holds a plain string, so every XADD gets
//! WRONGTYPE and they end up dead-lettered). The poison topic parks its keys
//! (`park_on_dead`): after the first poison event of each key dies, the key's later events
//! wait behind it, so the Dead letters page shows parked keys, and the log says once that the
//! poison is on purpose instead of repeating it every few seconds.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use diesel::sql_types::Text;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_core::backoff::ErrorLog;
use outbox_core::redis_conn::{self, RedisConn};
use outbox_core::{groups, keys, Entry};
use rand::Rng;

use crate::config::{GroupSpec, Settings, TopicSpec};
use crate::producer::{enqueue_many, NewEvent};

/// The demo's local database.
pub const DEMO_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/outbox_demo";
/// The topic whose events are poison.
pub const POISON_TOPIC: &str = "demo.poison";
/// The partition keys of the poison events, in turn: each parks once its first event is dead.
pub const POISON_KEYS: &[&str] = &["poison-1", "poison-2", "poison-3"];
/// One event in this many is poison.
const POISON_EVERY: u64 = 97;
const TOPICS: &[&str] = &["order.created", "payment.captured", "patient.admitted"];

/// The demo's consumer groups, on its first topic: the Streams page shows their lag.
pub const GROUPS: &[&str] = &["billing", "shipping"];

/// The demo's bottom configuration layer: a local database, quick dead-lettering, two
/// consumer groups, and the poison topic parking its keys.
pub fn default_settings() -> Settings {
    let mut s = Settings::default();
    s.database.url = Some(DEMO_DATABASE_URL.into());
    s.retry.max_attempts = 3;
    s.topics = vec![TopicSpec {
        name: POISON_TOPIC.into(),
        partitions: 1,
        envelope: None,
        park_on_dead: true,
    }];
    s.groups = GROUPS
        .iter()
        .map(|name| GroupSpec::new(TOPICS[0], name))
        .collect();
    s
}

/// Creates the database named in `url` if it does not exist.
pub async fn create_database(url: &str) -> anyhow::Result<()> {
    let mut parsed = url::Url::parse(url).context("database.url")?;
    let name = parsed.path().trim_start_matches('/').to_string();
    anyhow::ensure!(!name.is_empty(), "database.url names no database");
    parsed.set_path("/postgres");
    let mut conn = AsyncPgConnection::establish(parsed.as_str())
        .await
        .with_context(|| format!("cannot connect to {}", parsed))?;
    #[derive(diesel::QueryableByName)]
    struct Found {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        #[allow(dead_code)]
        one: i32,
    }
    let found: Vec<Found> =
        diesel::sql_query("SELECT 1 AS one FROM pg_database WHERE datname = $1")
            .bind::<Text, _>(&name)
            .load(&mut conn)
            .await?;
    if found.is_empty() {
        let quoted = name.replace('"', "\"\"");
        conn.batch_execute(&format!("CREATE DATABASE \"{quoted}\""))
            .await
            .with_context(|| format!("cannot create database {name}"))?;
        tracing::info!(database = %name, "created database");
    }
    Ok(())
}

fn sample(n: u64, rng: &mut impl Rng) -> NewEvent {
    if n % POISON_EVERY == 13 {
        let key = POISON_KEYS[((n / POISON_EVERY) % POISON_KEYS.len() as u64) as usize];
        return NewEvent::new(
            POISON_TOPIC,
            serde_json::json!({"n": n, "note": "its stream key is not a stream"}),
        )
        .key(key);
    }
    let topic = TOPICS[(n % TOPICS.len() as u64) as usize];
    let entity = rng.random_range(1..=40);
    let payload = serde_json::json!({
        "n": n,
        "entity": entity,
        "amount_cents": rng.random_range(100..100_000),
        "note": "<b>payloads are data, never markup</b>",
    });
    let event = NewEvent::new(topic, payload)
        .headers(serde_json::json!({"content-type": "application/json"}));
    if n.is_multiple_of(5) {
        event
    } else {
        event.key(format!(
            "{}-{entity}",
            topic.split('.').next().unwrap_or("entity")
        ))
    }
}

async fn produce(url: String, rate: u32) {
    let rate = u64::from(rate.max(1));
    let mut n: u64 = 0;
    let mut conn: Option<AsyncPgConnection> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if conn.is_none() {
            conn = AsyncPgConnection::establish(&url).await.ok();
        }
        let Some(c) = conn.as_mut() else { continue };
        let per_tick = (rate / 10).max(1);
        let events: Vec<NewEvent> = {
            let mut rng = rand::rng();
            (0..per_tick).map(|i| sample(n + i, &mut rng)).collect()
        };
        match enqueue_many(c, &events).await {
            Ok(_) => n += per_tick,
            Err(e) => {
                tracing::warn!("demo producer: {e}");
                conn = None;
            }
        }
    }
}

async fn plant_poison(settings: &Settings) -> anyhow::Result<()> {
    let client = redis::Client::open(settings.redis.url.as_str())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .context("cannot reach redis (redis.url)")?;
    let key = format!("{}{}", settings.redis.stream_prefix, POISON_TOPIC);
    redis::cmd("SET")
        .arg(&key)
        .arg("not a stream: events of this topic fail with WRONGTYPE")
        .query_async::<()>(&mut conn)
        .await?;
    Ok(())
}

/// How long the demo's `billing` consumer takes per event: slower than the producer, so the
/// Streams page shows its lag growing while `shipping`, which nobody reads, lags by everything.
const BILLING_EFFECT: Duration = Duration::from_millis(400);

/// The demo's `billing` consumer: a plain `XREADGROUP`/`XACK` loop. The relay does not link
/// its client library (`outbox-consumer`), whose users it serves; one slow reader on one
/// stream needs none of the library's retries, lanes or fleet.
async fn consume_slowly(settings: Settings) {
    if settings.redis.cluster {
        // One Redis server is read; the relay alone shows the cluster.
        return;
    }
    let stream = keys::stream_key(&settings.redis.stream_prefix, TOPICS[0]);
    let timeouts = redis_conn::Timeouts {
        connect: Duration::from_secs(5),
        // Above the blocking read's wait, so an empty stream is not a timeout.
        response: DEMO_READ_BLOCK + Duration::from_secs(5),
    };
    // A lazy connection that reconnects by itself: an outage only fails the round in hand.
    let mut conn = match redis_conn::connect(
        &settings.redis.url,
        &redis_conn::Topology::Single,
        timeouts,
        None,
    ) {
        Ok(conn) => conn,
        Err(e) => {
            tracing::warn!("demo consumer not started: {e}");
            return;
        }
    };
    let mut errors = ErrorLog::new(Duration::from_secs(60));
    // Its own pending entries first (left by an earlier run under the same name), then new ones.
    let mut from = DemoRead::Pending;
    loop {
        match consume_round(&mut conn, &stream, from).await {
            Ok(0) if from == DemoRead::Pending => from = DemoRead::New,
            Ok(_) => errors.reset(),
            Err(e) => {
                if let Some(suppressed) = errors.admit(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, "demo consumer: read failed; retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The demo consumer's name in its group.
const DEMO_CONSUMER: &str = "demo-billing";
/// Entries per read of the demo consumer.
const DEMO_READ_COUNT: usize = 10;
/// How long a read of the demo consumer waits for new entries.
const DEMO_READ_BLOCK: Duration = Duration::from_secs(1);

/// Which entries a round of the demo consumer reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DemoRead {
    /// Those delivered to it before and not acknowledged.
    Pending,
    /// Those never delivered to the group.
    New,
}

/// One read of the demo consumer: each entry "handled" (a pause), then acknowledged. Creates
/// the group if it is missing (the relay declares it too, and Redis may have lost it).
/// Returns how many entries it read.
async fn consume_round(
    conn: &mut RedisConn,
    stream: &str,
    from: DemoRead,
) -> redis::RedisResult<usize> {
    let mut read = redis::cmd("XREADGROUP");
    read.arg("GROUP")
        .arg(GROUPS[0])
        .arg(DEMO_CONSUMER)
        .arg("COUNT")
        .arg(DEMO_READ_COUNT);
    if from == DemoRead::New {
        read.arg("BLOCK")
            .arg(u64::try_from(DEMO_READ_BLOCK.as_millis()).unwrap_or(1000));
    }
    let id = match from {
        DemoRead::Pending => "0",
        DemoRead::New => ">",
    };
    read.arg("STREAMS").arg(stream).arg(id);
    let reply: redis::Value = match read.query_async(conn).await {
        Ok(reply) => reply,
        Err(e) if groups::is_nogroup(&e) => {
            groups::create(conn, stream, GROUPS[0], "0").await?;
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    if reply == redis::Value::Nil {
        return Ok(0);
    }
    let entries = Entry::from_read_reply(reply)?;
    for (id, entry) in &entries {
        match entry {
            Ok(_) => tokio::time::sleep(BILLING_EFFECT).await,
            // Nothing to do with it but move on: the demo has no dead stream of its own.
            Err(e) => {
                tracing::warn!(stream_id = %id, error = %e, "demo consumer: malformed entry acknowledged")
            }
        }
        redis::cmd("XACK")
            .arg(stream)
            .arg(GROUPS[0])
            .arg(id)
            .query_async::<()>(conn)
            .await?;
    }
    Ok(entries.len())
}

/// Runs the demo until SIGTERM/SIGINT.
pub async fn run(settings: Settings, rate: u32, traced: bool) -> anyhow::Result<()> {
    let url = settings.database_url()?.to_string();
    create_database(&url).await?;
    crate::db::migrate::run_pending(&url).await?;
    plant_poison(&settings).await?;
    let addr = settings.admin_addr()?;
    println!("outbox-relay demo");
    println!("  database : {url}");
    println!("  admin    : http://{addr}/  (health /healthz, /readyz; metrics /metrics)");
    println!(
        "  producing: {rate} events/s on {} plus a few poison events on {POISON_TOPIC}",
        TOPICS.join(", ")
    );
    println!(
        "  read     : redis-cli XRANGE {}order.created - + COUNT 5",
        settings.redis.stream_prefix
    );
    println!(
        "  consume  : redis-cli XREADGROUP GROUP shipping me COUNT 5 STREAMS {}{} '>'  (groups: {}; billing has a slow demo consumer)",
        settings.redis.stream_prefix,
        TOPICS[0],
        GROUPS.join(", ")
    );
    println!("  dead     : psql {url} -c 'SELECT id, topic, attempts, last_error FROM outbox WHERE dead_at IS NOT NULL'");
    println!("  stop     : Ctrl-C");
    tracing::info!(
        topic = POISON_TOPIC,
        keys = %POISON_KEYS.join(", "),
        "demo: the events of {POISON_TOPIC} are poison on purpose (its stream key {}{POISON_TOPIC} holds a string, so Redis answers WRONGTYPE): \
         the first of each key logs one \"publish failed\" line and one \"event dead-lettered\" line, then its key parks and its later events wait; \
         any other failure is real",
        settings.redis.stream_prefix
    );
    let producer = actix_rt::spawn(produce(url, rate));
    let consumer = actix_rt::spawn(consume_slowly(settings.clone()));
    let result = crate::app::run(settings, traced).await;
    producer.abort();
    consumer.abort();
    result
}
