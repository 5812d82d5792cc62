//! An inbox consumer (docs/consumers.md, "The Rust library"): reads a topic as a member of a consumer group and,
//! for each entry, inserts one row into `example_effects` in the same transaction as the
//! inbox record of the event, then acknowledges it. A redelivered entry is skipped, so every
//! event has exactly one row, whatever crashes happen.
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1/app REDIS_URL=redis://127.0.0.1:6379 \
//!   cargo run --release -p outbox-consumer --features otel --example inbox_consumer -- \
//!     --topic order.created --group billing
//! ```
//!
//! A payload with `"poison": true` makes the handler fail; after `--max-deliveries` it goes
//! to `<stream_prefix><topic>:dead`. SIGTERM or SIGINT stops it after the entries in hand.
//! On a Redis Cluster pass `--cluster` (or `OUTBOX__REDIS__CLUSTER=true`) with the seed nodes,
//! comma-separated, in `REDIS_URL`.
//!
//! Logs go to stderr (`RUST_LOG`, default `info`); with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the
//! processing spans go over OTLP/HTTP as children of the relay's publish spans (the `otel`
//! feature), as service `inbox-consumer` unless `OTEL_SERVICE_NAME` says otherwise.

use std::time::Duration;

use clap::Parser;
use diesel::sql_types::{Text, Uuid};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use outbox_consumer::inbox::{self, Inbox};
use outbox_consumer::{Consumer, ConsumerConfig, Entry};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

#[derive(Parser)]
#[command(about = "Consume an outbox topic into example_effects, exactly once, with the inbox")]
struct Args {
    /// The topic to consume.
    #[arg(long)]
    topic: String,
    /// The consumer group.
    #[arg(long)]
    group: String,
    /// This consumer's name in the group (default: hostname-pid).
    #[arg(long)]
    consumer: Option<String>,
    /// Entries idle this long in another consumer's hands are claimed by this one.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    claim_idle: Duration,
    /// Deliveries after which a failing entry goes to the dead stream.
    #[arg(long, default_value_t = 5)]
    max_deliveries: u64,
    /// Once an entry is dead-lettered, hold its key's later entries until an operator
    /// discards or redrives it (the library's `park_keys`).
    #[arg(long)]
    park_keys: bool,
    /// The relay's stream prefix.
    #[arg(long, env = "OUTBOX__REDIS__STREAM_PREFIX", default_value = "outbox:")]
    stream_prefix: String,
    /// The consumer's database (example_effects and outbox_inbox live there).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The relay's Redis.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    redis_url: String,
    /// `REDIS_URL` names a Redis Cluster's seed nodes, comma-separated (as the relay's
    /// `redis.cluster`).
    #[arg(long, env = "OUTBOX__REDIS__CLUSTER")]
    cluster: bool,
    /// `REDIS_URL` lists Redis Sentinels that monitor the master under this name (as the
    /// relay's `redis.sentinel_master`).
    #[arg(long, env = "OUTBOX__REDIS__SENTINEL_MASTER")]
    sentinel_master: Option<String>,
    /// The Sentinels' own password (as the relay's `redis.sentinel_password`).
    #[arg(long, env = "OUTBOX__REDIS__SENTINEL_PASSWORD", hide_env_values = true)]
    sentinel_password: Option<String>,
    /// Entries per read.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Partition keys handled at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// First retry delay of a failed entry (doubling, capped at 10 s or claim idle / 2).
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    retry_base: Duration,
    /// Testing aid: each effect waits this long inside its transaction.
    #[arg(long, hide = true, value_parser = humantime::parse_duration)]
    effect_delay: Option<Duration>,
}

const EFFECTS_TABLE: &str = "CREATE TABLE IF NOT EXISTS example_effects (
    event_id uuid NOT NULL,
    topic text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

/// The advisory lock key that serializes the creation of `example_effects` ("example-" in
/// ASCII): any key no other part of the application locks would do.
const EFFECTS_DDL_LOCK: i64 = 0x6578_616d_706c_652d;

#[derive(Debug, thiserror::Error)]
enum EffectError {
    #[error("poison event: its payload says \"poison\": true")]
    Poison,
    #[error("example_effects insert: {0}")]
    Db(#[from] diesel::result::Error),
}

#[tokio::main]
async fn main() {
    let traces = match install_telemetry() {
        Ok(provider) => provider,
        Err(e) => {
            eprintln!("inbox_consumer: OTLP trace exporter: {e}");
            std::process::exit(2);
        }
    };
    let args = Args::parse();
    let result = run(args).await;
    // Sends the spans still queued before the process ends.
    if let Some(provider) = traces {
        if let Err(e) = provider.shutdown() {
            eprintln!("inbox_consumer: the last spans could not be sent: {e}");
        }
    }
    if let Err(e) = result {
        eprintln!("inbox_consumer: {e}");
        std::process::exit(1);
    }
}

/// Logs to stderr as `RUST_LOG` says (default `info`); and, when the standard OpenTelemetry
/// environment names an endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_TRACES_EXPORTER` not `none`), the library's
/// processing spans (target [`outbox_core::trace::TARGET`], nothing else) over OTLP/HTTP.
/// Returns the provider to shut down at the end, which sends the spans still queued.
fn install_telemetry() -> Result<Option<SdkTracerProvider>, opentelemetry_otlp::ExporterBuildError>
{
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(logs);
    let off = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    if off || !endpoint {
        registry.init();
        return Ok(None);
    }
    // reqwest's rustls asks for a process-wide crypto provider (already set is fine).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()?;
    let name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| "inbox-consumer".to_string());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(name).build())
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(env!("CARGO_PKG_NAME")))
        .with_filter(Targets::new().with_target(outbox_core::trace::TARGET, tracing::Level::TRACE));
    registry.with(spans).init();
    Ok(Some(provider))
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let retry_max = (args.claim_idle / 2).min(Duration::from_secs(10));
    let mut config = ConsumerConfig::new(&args.redis_url, &args.topic, &args.group)
        .stream_prefix(&args.stream_prefix)
        .cluster(args.cluster)
        .claim_idle(args.claim_idle)
        .max_deliveries(args.max_deliveries)
        .park_keys(args.park_keys)
        .batch_size(args.batch_size)
        .concurrency(args.concurrency)
        .retry(args.retry_base, retry_max.max(args.retry_base));
    if let Some(name) = &args.consumer {
        config = config.consumer(name);
    }
    if let Some(master) = &args.sentinel_master {
        config = config.sentinel(master, args.sentinel_password.clone());
    }
    let consumer = Consumer::new(config)?;

    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(&args.database_url);
    let pool = bb8::Pool::builder()
        .max_size(args.concurrency.clamp(2, 32) as u32)
        .connection_timeout(Duration::from_secs(5))
        .build(manager)
        .await?;
    {
        let mut conn = pool.get().await?;
        // Copies starting together would race on CREATE TABLE: a transaction-scoped advisory
        // lock of the example's own serializes them (the inbox's tables take the library's).
        conn.batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({EFFECTS_DDL_LOCK}); {EFFECTS_TABLE}; COMMIT"
        ))
        .await?;
        inbox::ensure_table(&mut conn).await?;
    }

    let delay = args.effect_delay;
    let stats = consumer
        .run(
            Inbox::new(pool, |conn, entry: &Entry| {
                Box::pin(async move {
                    if entry.payload.get("poison") == Some(&serde_json::Value::Bool(true)) {
                        return Err(EffectError::Poison);
                    }
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    diesel::sql_query(
                        "INSERT INTO example_effects (event_id, topic) VALUES ($1, $2)",
                    )
                    .bind::<Uuid, _>(entry.id)
                    .bind::<Text, _>(&entry.topic)
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            }),
            shutdown_signal(),
        )
        .await;
    tracing::info!(
        handled = stats.handled,
        failed = stats.failed,
        dead_lettered = stats.dead_lettered,
        "stopped"
    );
    Ok(())
}

/// Completes at the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the default action (exit) applies: still a clean stop
        // for the stream, which redelivers what was in hand.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
