//! Bench plumbing: scratch databases and stream prefixes, relay processes with their CPU
//! and memory read from /proc, WAL positions, and the drain scenario itself.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use diesel::sql_types::{BigInt, Double};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use uuid::Uuid;

use outbox_relay::publish::connect::{self, RedisConn};

use crate::machine::{Load, Meter};
use crate::Figure;

/// Topics of the mixed workload.
pub const TOPICS: u64 = 10;

/// Where the bench runs.
#[derive(Debug, Clone)]
pub struct BenchEnv {
    /// Admin URL of the local Postgres.
    pub postgres_url: String,
    /// Redis URL; with `cluster`, the seed nodes.
    pub redis_url: String,
    /// The CA that signs the Redis server's certificate, for a `rediss://` URL.
    pub redis_ca: Option<std::path::PathBuf>,
    /// Redis is a cluster (`redis.cluster = true` for the relays).
    pub cluster: bool,
    /// The `outbox-relay` binary the relays run.
    pub relay_bin: std::path::PathBuf,
    /// Every workload topic partitioned and consumed by a fleet (the fleet scenario).
    pub fleet: Option<FleetShape>,
    /// The end-to-end consumers park keys (`park_keys`).
    pub park_keys: bool,
    /// Settings every relay of this environment gets (`OUTBOX__...` variables).
    pub relay_env: Vec<(String, String)>,
}

/// Partitions of each workload topic, and consumers in the end-to-end group dividing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetShape {
    /// Partitions of each topic.
    pub partitions: u32,
    /// Consumers of the group.
    pub consumers: usize,
}

impl BenchEnv {
    /// The environment at these URLs, with relays of `relay_bin`.
    pub fn new(postgres_url: &str, redis_url: &str, relay_bin: &std::path::Path) -> Self {
        BenchEnv {
            postgres_url: postgres_url.to_string(),
            redis_url: redis_url.to_string(),
            redis_ca: None,
            cluster: false,
            relay_bin: relay_bin.to_path_buf(),
            fleet: None,
            park_keys: false,
            relay_env: Vec::new(),
        }
    }

    /// The same servers with every workload topic in `shape.partitions` partitions, divided
    /// by `shape.consumers` end-to-end consumers.
    pub fn with_fleet(&self, shape: FleetShape) -> Self {
        BenchEnv {
            fleet: Some(shape),
            ..self.clone()
        }
    }

    /// The same with the end-to-end consumers parking keys.
    pub fn with_park_keys(&self) -> Self {
        BenchEnv {
            park_keys: true,
            ..self.clone()
        }
    }

    /// The same with every relay getting the variable `name` = `value`.
    pub fn with_relay_env(&self, name: &str, value: &str) -> Self {
        let mut env = self.clone();
        env.relay_env.push((name.into(), value.into()));
        env
    }

    /// The same Redis with the Postgres at `admin_url` (scratch databases are made there).
    pub fn on_postgres(&self, admin_url: &str) -> Self {
        BenchEnv {
            postgres_url: admin_url.to_string(),
            ..self.clone()
        }
    }

    /// Partitions of each workload topic.
    pub fn partitions(&self) -> u32 {
        self.fleet.map_or(1, |f| f.partitions)
    }

    /// The same Postgres with the Redis Cluster at `seeds`.
    pub fn on_cluster(&self, seeds: &str) -> Self {
        BenchEnv {
            redis_url: seeds.to_string(),
            cluster: true,
            ..self.clone()
        }
    }

    /// A multiplexed Redis connection with a generous response timeout, over TLS when the
    /// environment has a CA.
    pub async fn redis(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
        let client = match &self.redis_ca {
            None => redis::Client::open(self.redis_url.as_str())?,
            Some(ca) => redis::Client::build_with_tls(
                self.redis_url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(ca)?),
                },
            )?,
        };
        Ok(client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }
}

/// A Postgres connection as the relay makes them (TLS as the URL's `sslmode` says).
pub async fn pg(url: &str) -> anyhow::Result<AsyncPgConnection> {
    Ok(outbox_relay::db::tls::connect(url).await?)
}

/// A fresh, migrated database and stream prefix; removed by [`Scratch::cleanup`].
pub struct Scratch {
    /// Database name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Stream prefix of this scenario.
    pub prefix: String,
    env: BenchEnv,
}

fn url_with_db(admin: &str, db: &str) -> anyhow::Result<String> {
    let mut url = url::Url::parse(admin).context("postgres url")?;
    url.set_path(&format!("/{db}"));
    Ok(url.to_string())
}

impl Scratch {
    /// Creates and migrates a database for one scenario.
    pub async fn new(env: &BenchEnv) -> anyhow::Result<Scratch> {
        let id = Uuid::new_v4().simple().to_string();
        let name = format!("outbox_bench_{}", &id[..12]);
        let mut admin = pg(&env.postgres_url).await.context("connect to postgres")?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        let url = url_with_db(&env.postgres_url, &name)?;
        outbox_relay::db::migrate::run_pending(&url).await?;
        if let Ok(extra) = std::env::var("BENCH_EXTRA_SQL") {
            pg(&url).await?.batch_execute(&extra).await?;
        }
        Ok(Scratch {
            name,
            url,
            prefix: format!("bench-{}:", &id[..12]),
            env: env.clone(),
        })
    }

    /// A connection to the scratch database.
    pub async fn conn(&self) -> anyhow::Result<AsyncPgConnection> {
        pg(&self.url).await
    }

    /// Stream key of topic `n` of the workload.
    pub fn stream(&self, n: u64) -> String {
        format!("{}bench.topic{n}", self.prefix)
    }

    /// Every stream of the workload: each topic's, or each of its partitions'.
    pub fn streams(&self) -> Vec<String> {
        (0..TOPICS)
            .flat_map(|t| {
                let topic = format!("bench.topic{t}");
                outbox_core::keys::partition_keys(&self.prefix, &topic, self.env.partitions())
            })
            .collect()
    }

    /// Total entries in the workload's streams (one XLEN each, all at once: on a cluster
    /// each goes to its stream's master).
    pub async fn streamed(&self, redis: &RedisConn) -> anyhow::Result<u64> {
        let lens = futures::future::try_join_all(self.streams().into_iter().map(|key| {
            let mut redis = redis.clone();
            async move {
                redis::cmd("XLEN")
                    .arg(key)
                    .query_async::<u64>(&mut redis)
                    .await
            }
        }))
        .await?;
        Ok(lens.iter().sum())
    }

    /// Drops the database and deletes the streams (and their dedup sets).
    pub async fn cleanup(self) {
        if let Ok(mut admin) = pg(&self.env.postgres_url).await {
            let _ = admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await;
        }
        if let Ok(mut redis) = redis_link(&self.env) {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*{}*", self.prefix))
                .query_async(&mut redis)
                .await
                .unwrap_or_default();
            for chunk in keys.chunks(500) {
                let _: redis::RedisResult<()> =
                    redis::cmd("DEL").arg(chunk).query_async(&mut redis).await;
            }
        }
    }
}

/// A connection to the bench's Redis, or to its cluster (commands routed by key), over TLS
/// when the environment has a CA, with a generous response timeout.
pub fn redis_link(env: &BenchEnv) -> anyhow::Result<RedisConn> {
    let settings = outbox_relay::config::RedisSettings {
        url: env.redis_url.clone(),
        cluster: env.cluster,
        timeout: Duration::from_secs(30),
        ca_file: env.redis_ca.clone(),
        ..Default::default()
    };
    let tls = settings.tls_files().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(connect::connect(&settings, tls.as_ref())?)
}

/// `OUTBOX__TOPICS` for every workload topic in `partitions` partitions.
pub fn topics_setting(partitions: u32) -> String {
    (0..TOPICS)
        .map(|t| format!("bench.topic{t}:{partitions}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `OUTBOX__TOPICS` giving every workload topic `park_on_dead` (as inline TOML tables).
pub fn parking_setting() -> String {
    let tables: Vec<String> = (0..TOPICS)
        .map(|t| format!("{{name=\"bench.topic{t}\", park_on_dead=true}}"))
        .collect();
    format!("[{}]", tables.join(", "))
}

/// The shape of the preloaded backlog.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// 10 topics, half the events keyed over 1000 keys, ~250-byte payloads.
    Mixed,
    /// Every event on one topic and one partition key.
    HotKey,
    /// The mixed backlog behind this many published rows that retention has not removed yet
    /// (older, lower `seq`), as in a table keeping a week of history.
    Bloated(u64),
    /// The mixed backlog written into an adopted table ([`crate::adopted`]); `delete`: each
    /// producer transaction deletes its rows again.
    Adopted {
        /// Insert-then-delete.
        delete: bool,
    },
}

/// Preloads `n` events.
pub async fn preload(scratch: &Scratch, n: u64, shape: Shape) -> anyhow::Result<()> {
    let mut conn = scratch.conn().await?;
    if let Shape::Bloated(published) = shape {
        conn.batch_execute(&format!(
            "INSERT INTO outbox (topic, payload, partition_key, created_at, published_at)
             SELECT 'bench.topic' || (i % {TOPICS}), jsonb_build_object('n', i, 'pad', repeat('x', 220)),
                    CASE WHEN i % 2 = 0 THEN 'key-' || (i % 1000) END,
                    now() - interval '1 hour', now() - interval '1 hour'
             FROM generate_series(1, {published}) AS i ORDER BY i"
        ))
        .await?;
    }
    let sql = match shape {
        Shape::Mixed | Shape::Bloated(_) => format!(
            "INSERT INTO outbox (topic, payload, partition_key)
             SELECT 'bench.topic' || (i % {TOPICS}), jsonb_build_object('n', i, 'pad', repeat('x', 220)),
                    CASE WHEN i % 2 = 0 THEN 'key-' || (i % 1000) END
             FROM generate_series(1, {n}) AS i ORDER BY i"
        ),
        Shape::Adopted { delete } => return crate::adopted::preload(scratch, n, delete).await,
        Shape::HotKey => format!(
            "INSERT INTO outbox (topic, payload, partition_key)
             SELECT 'bench.topic0', jsonb_build_object('n', i, 'pad', repeat('x', 220)), 'hot'
             FROM generate_series(1, {n}) AS i ORDER BY i"
        ),
    };
    conn.batch_execute(&sql).await?;
    conn.batch_execute("VACUUM ANALYZE outbox").await?;
    Ok(())
}

/// The current WAL position in bytes.
pub async fn wal_position(conn: &mut AsyncPgConnection) -> anyhow::Result<f64> {
    #[derive(QueryableByName)]
    struct Lsn {
        #[diesel(sql_type = Double)]
        bytes: f64,
    }
    let lsn: Lsn =
        diesel::sql_query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8 AS bytes")
            .get_result(conn)
            .await?;
    Ok(lsn.bytes)
}

/// Pending rows.
pub async fn pending(conn: &mut AsyncPgConnection) -> anyhow::Result<i64> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let c: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM outbox WHERE published_at IS NULL AND dead_at IS NULL",
    )
    .get_result(conn)
    .await?;
    Ok(c.n)
}

/// A relay process (`outbox-relay run`).
pub struct RelayProcess {
    child: Child,
}

/// CPU seconds and peak RSS (MB) of a process, from /proc.
fn proc_usage(pid: u32) -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1.to_string();
            let fields: Vec<&str> = after.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0);
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / 1024.0)
        })
        .unwrap_or(0.0);
    (cpu, rss)
}

impl RelayProcess {
    /// Starts `outbox-relay run` on the scratch database.
    pub fn start(
        scratch: &Scratch,
        env: &BenchEnv,
        name: &str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&env.relay_bin)
            .arg("run")
            .env("DATABASE_URL", &scratch.url)
            .env("REDIS_URL", &env.redis_url)
            .env("OUTBOX__REDIS__CLUSTER", env.cluster.to_string())
            .env("OUTBOX__REDIS__STREAM_PREFIX", &scratch.prefix)
            .env("OUTBOX__ADMIN__ADDR", format!("127.0.0.1:{port}"))
            .env("OUTBOX__INSTANCE_ID", name)
            // BENCH_RELAY_LOG=outbox_relay=trace shows each cycle's phase times.
            .env(
                "RUST_LOG",
                std::env::var("BENCH_RELAY_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(
                env.redis_ca
                    .iter()
                    .map(|ca| ("OUTBOX__REDIS__CA_FILE", ca.as_os_str())),
            )
            .envs(
                env.fleet
                    .map(|f| ("OUTBOX__TOPICS", topics_setting(f.partitions))),
            )
            .envs(env.relay_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(extra.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start relay {}", env.relay_bin.display()))?;
        Ok(RelayProcess { child })
    }

    /// Stops it (SIGTERM, then SIGKILL after 10 s); returns (cpu seconds, peak RSS MB).
    pub fn stop(mut self) -> (f64, f64) {
        let pid = self.child.id();
        let usage = proc_usage(pid);
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return usage;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        usage
    }
}

/// A drain's measurements.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    /// Events drained.
    pub events: u64,
    /// Wall time.
    pub seconds: f64,
    /// Relay CPU seconds.
    pub cpu: f64,
    /// Largest relay peak RSS.
    pub rss: f64,
    /// WAL bytes written during the drain.
    pub wal: f64,
    /// Machine and Redis CPU during the drain.
    pub load: Load,
    /// When the relays' first entries appeared (see [`FirstEntries`]).
    pub first: Option<FirstEntries>,
}

/// The moment the first entries showed up in the streams: process start-up ends there.
#[derive(Debug, Clone, Copy)]
pub struct FirstEntries {
    /// Seconds after the relays were started.
    pub seconds: f64,
    /// Entries in the streams at that moment.
    pub events: u64,
}

impl Drain {
    /// Events/s once the relays were up: from the first entries to the last, so starting
    /// processes (more of them with more replicas) is reported apart, not as drain time.
    pub fn rate(&self) -> f64 {
        match self.first {
            Some(first) if self.seconds > first.seconds && self.events > first.events => {
                (self.events - first.events) as f64 / (self.seconds - first.seconds)
            }
            _ => self.events as f64 / self.seconds.max(1e-9),
        }
    }

    /// As a figure.
    pub fn figure(&self, name: &str) -> Figure {
        Figure {
            scenario: name.into(),
            events: self.events,
            seconds: Some(self.seconds),
            events_per_sec: Some(self.rate()),
            start_up_ms: self.first.map(|f| f.seconds * 1000.0),
            cpu_seconds: (self.cpu > 0.0).then_some(self.cpu),
            peak_rss_mb: (self.rss > 0.0).then_some(self.rss),
            wal_bytes_per_event: Some(self.wal / self.events.max(1) as f64),
            redis_cpu_seconds: self.load.redis_cpu,
            busy_cores: self.load.busy_cores,
            ..Figure::default()
        }
    }
}

/// What a drain body measured itself; the harness measures time and WAL around it.
#[derive(Debug, Default, Clone)]
pub struct Usage {
    /// Relay CPU seconds.
    pub cpu: f64,
    /// Largest relay peak RSS, MB.
    pub rss: f64,
    /// The drain's own end, when it comes before the body returns (stopping processes).
    pub seconds: Option<f64>,
    /// When the first entries appeared, for bodies that start processes.
    pub first: Option<FirstEntries>,
}

/// Runs `body` against a fresh database holding `n` preloaded events (after `setup_sql`),
/// timing it and measuring the WAL it writes; drops the database and streams afterwards.
pub async fn measure_drain<F>(
    env: &BenchEnv,
    n: u64,
    shape: Shape,
    setup_sql: &str,
    body: F,
) -> anyhow::Result<Drain>
where
    F: AsyncFnOnce(&Scratch) -> anyhow::Result<Usage>,
{
    let scratch = Scratch::new(env).await?;
    let result = async {
        // A checkpoint first, so none starts during the drain: the first change of each page
        // after a checkpoint writes the whole page to the WAL, and whether that lands in the
        // measured drain would otherwise depend on the previous scenario's WAL volume. In
        // steady operation the relay changes a row moments after its insert, in the same
        // checkpoint cycle, so the insert pays for that page image, not the relay.
        // Best effort: it needs superuser or pg_checkpoint.
        if let Err(e) = scratch.conn().await?.batch_execute("CHECKPOINT").await {
            tracing::warn!("bench: CHECKPOINT refused ({e}); WAL figures may include page images");
        }
        preload(&scratch, n, shape).await?;
        let mut conn = scratch.conn().await?;
        if !setup_sql.is_empty() {
            conn.batch_execute(setup_sql).await?;
        }
        let wal_before = wal_position(&mut conn).await?;
        let mut redis = redis_link(env)?;
        let meter = Meter::start(&mut redis).await;
        let started = Instant::now();
        let usage = body(&scratch).await?;
        let load = meter.stop(&mut redis).await;
        let seconds = usage
            .seconds
            .unwrap_or_else(|| started.elapsed().as_secs_f64());
        anyhow::ensure!(
            pending(&mut conn).await? == 0,
            "the drain left pending rows"
        );
        let wal = wal_position(&mut conn).await? - wal_before;
        Ok(Drain {
            events: n,
            seconds,
            cpu: usage.cpu,
            rss: usage.rss,
            wal,
            load,
            first: usage.first,
        })
    }
    .await;
    scratch.cleanup().await;
    result
}

/// Preloads `n` events, starts `replicas` relays, times until every event is in a stream.
pub async fn drain(
    env: &BenchEnv,
    n: u64,
    replicas: usize,
    shape: Shape,
    extra: &[(&str, &str)],
) -> anyhow::Result<Drain> {
    measure_drain(env, n, shape, "", async |scratch: &Scratch| {
        let mut conn = scratch.conn().await?;
        let redis = redis_link(env)?;
        let started = Instant::now();
        let relays = (0..replicas)
            .map(|i| RelayProcess::start(scratch, env, &format!("bench-{i}"), extra))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let deadline = started + Duration::from_secs(600);
        let mut first = None;
        loop {
            let streamed = scratch.streamed(&redis).await?;
            if streamed > 0 && first.is_none() {
                first = Some(FirstEntries {
                    seconds: started.elapsed().as_secs_f64(),
                    events: streamed,
                });
            }
            if streamed >= n {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "drain did not finish in 10 minutes"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seconds = started.elapsed().as_secs_f64();
        // The rows are marked in the same transaction as the XADD: wait for the last commit.
        while pending(&mut conn).await? > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut usage = Usage {
            seconds: Some(seconds),
            first,
            ..Usage::default()
        };
        for relay in relays {
            let (cpu, rss) = relay.stop();
            usage.cpu += cpu;
            usage.rss = usage.rss.max(rss);
        }
        Ok(usage)
    })
    .await
}
