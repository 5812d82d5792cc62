//! Wiring: pools, the relay's actors, the admin server, signals and graceful shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::FutureExt;

use crate::admin::{self, AdminState};
use crate::config::{ConfigError, Settings};
use crate::db::{self, pool::Drivers};
use crate::publish::connect;
use crate::publish::{Durability, Envelopes, Publisher, PublisherConfig};
use crate::relay::{self, health::Health};

/// How long shutdown waits for the batch in hand.
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

/// `outbox-relay migrate`.
pub async fn migrate(
    settings: &Settings,
    wait: std::time::Duration,
    release: &[String],
) -> anyhow::Result<()> {
    let url = settings.database_url()?;
    if let Some(listed) = release
        .iter()
        .find(|name| settings.tables.iter().any(|t| &t.name == *name))
    {
        return Err(ConfigError {
            setting: "--release".into(),
            message: format!(
                "table `{listed}` is still in [[tables]]: remove its entry before releasing it"
            ),
        }
        .into());
    }
    let plan = db::migrate::Plan {
        tables: Some(settings.tables.clone()),
        release: release.to_vec(),
        runtime_role: settings.database.runtime_role.clone(),
    };
    let migrated = db::migrate::prepare_waiting(url, &plan, wait).await?;
    if let Some(role) = &plan.runtime_role {
        tracing::info!(
            role,
            "database.runtime_role granted the rows of the relay's tables"
        );
    }
    for table in &migrated.tables.adopted {
        tracing::info!(
            table,
            "adopted table prepared: rows inserted from now on are published"
        );
    }
    for table in &migrated.tables.released {
        tracing::info!(
            table,
            "adopted table released: its rows are no longer published"
        );
    }
    for table in &migrated.tables.kept {
        tracing::warn!(
            table,
            "adopted table kept: it is not in [[tables]] (is this migrate missing its --config?), so its rows are still published; release it with `outbox-relay migrate --release {table}`"
        );
    }
    for table in &migrated.tables.not_adopted {
        tracing::warn!(
            table,
            "--release: no adopted table has this name, nothing released (the adopted tables are named as in their [[tables]] entry)"
        );
    }
    tracing::info!(applied = migrated.applied, "migrations up to date");
    Ok(())
}

/// Refuses settings that would expose the admin without a token.
pub fn check_admin_exposure(settings: &Settings) -> Result<(), ConfigError> {
    let addr = settings.admin_addr()?;
    if !addr.ip().is_loopback() && settings.admin.token.as_deref().unwrap_or("").is_empty() {
        return Err(ConfigError {
            setting: "admin.token".into(),
            message: format!(
                "is required to serve the admin on non-loopback address {addr} (set OUTBOX__ADMIN__TOKEN)"
            ),
        });
    }
    Ok(())
}

/// `outbox-relay run`: the relay and the admin server until SIGTERM/SIGINT; `traced`: spans
/// are exported, so publishing makes them.
pub async fn run(settings: Settings, traced: bool) -> anyhow::Result<()> {
    run_until(settings, traced, shutdown_signal()).await
}

/// Runs until `stop` resolves; `demo` passes its own.
pub async fn run_until(
    settings: Settings,
    traced: bool,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let url = settings.database_url()?.to_string();
    let addr = settings.admin_addr()?;
    let (relay_db, admin_db) = open_databases(&settings, &url);
    let configured = settings.configured_partitions();
    let parking = settings.parking_topics();
    // Refuse at once when Postgres answers; when it does not, the check goes on beside the
    // relay, which publishes by the recorded counts meanwhile.
    let first = tokio::time::timeout(
        Duration::from_secs(2),
        check_recorded(&admin_db, &configured, &parking, &settings.tables),
    )
    .await;
    let check_db = admin_db.clone();
    let tables = settings.tables.clone();
    let partitions = async move {
        match first {
            Ok(Ok(None)) => std::future::pending().await,
            Ok(Ok(Some(refused))) => refused,
            Ok(Err(_)) | Err(_) => recorded_check(check_db, configured, parking, tables).await,
        }
    };
    let mut partitions = std::pin::pin!(partitions);
    if let Some(refused) = (&mut partitions).now_or_never() {
        return Err(refused.into());
    }
    let publisher = open_publisher(&settings, traced)?;
    let health = Arc::new(Health::default());
    crate::telemetry::set_max_metric_topics(settings.admin.max_metric_topics);
    let metrics = crate::telemetry::install_metrics();
    for topic in settings.parking_topics() {
        crate::telemetry::parking_topic_known(&topic);
    }
    if let Some(handle) = &metrics {
        crate::telemetry::spawn_upkeep(handle.clone());
    }
    let relay = relay::start(relay::Wiring {
        settings: &settings,
        database_url: &url,
        db: relay_db,
        admin_db: admin_db.clone(),
        publisher: publisher.clone(),
        health: health.clone(),
    });
    let state = AdminState {
        db: admin_db,
        publisher,
        health: health.clone(),
        stall_after: settings.relay.stall_after,
        metrics,
        tokens: admin::auth::Tokens::from_settings(&settings.admin),
        throttle: Arc::new(admin::throttle::Throttle::new(
            settings.admin.failed_logins_per_minute,
            Duration::from_secs(60),
        )),
        wake: Some(relay.waker()),
        heartbeat_interval: settings.relay.heartbeat_interval,
        published: Default::default(),
        max_response_bytes: i64::try_from(settings.admin.max_response_bytes).unwrap_or(i64::MAX),
    };
    register_known_topics(&state).await;
    let server =
        admin::serve(state, addr).with_context(|| format!("cannot listen on admin.addr {addr}"))?;
    let server_handle = server.handle();
    let server_task = actix_rt::spawn(server);
    tracing::info!(
        instance = %settings.instance_id(),
        admin = %addr,
        "outbox-relay running"
    );

    let mut refused = None;
    let lost = tokio::select! {
        () = stop => None,
        actor = relay.lost() => Some(actor),
        error = &mut partitions => {
            refused = Some(error);
            None
        }
    };
    if let Some(actor) = lost {
        crate::telemetry::actor_lost(actor);
        health.set_lost(actor);
    }
    tracing::info!("shutting down: draining the claim loop");
    health.set_stopping();
    relay.shutdown(DRAIN_DEADLINE).await;
    server_handle.stop(true).await;
    let _ = server_task.await;
    tracing::info!("stopped");
    if let Some(error) = refused {
        return Err(error.into());
    }
    match lost {
        Some(actor) => Err(ActorLost(actor).into()),
        None => Ok(()),
    }
}

/// Records the configured partition counts of new topics and compares the others with the
/// recorded ones: the refusal of a count that differs (the relay would split a topic's keys
/// differently from the streams its consumers read), if any. Records which topics park their
/// keys on a dead event (`parking`).
async fn check_recorded(
    db: &db::Db,
    configured: &HashMap<String, u32>,
    parking: &[String],
    tables: &[crate::config::TableSpec],
) -> Result<Option<ConfigError>, db::DbError> {
    let drift = db
        .unit(async |c| db::adopted::drift(c, tables).await)
        .await?;
    if let Some(message) = drift {
        return Ok(Some(ConfigError {
            setting: "tables".into(),
            message,
        }));
    }
    let mismatches = db
        .unit(async |c| {
            let mismatches = db::topics::record_partitions(c, configured).await?;
            db::topics::record_parking(c, parking).await?;
            Ok::<_, db::DbError>(mismatches)
        })
        .await?;
    Ok(mismatches.into_iter().next().map(|m| ConfigError {
        setting: "topics".into(),
        message: format!(
            "topic `{}` has {} partitions recorded in Postgres and {} configured: \
             change the count with `outbox-relay repartition {} {}`, or configure {}",
            m.topic, m.recorded, m.configured, m.topic, m.configured, m.recorded
        ),
    }))
}

/// [`check_recorded`], retried while Postgres does not answer; resolves only with a refusal.
async fn recorded_check(
    db: db::Db,
    configured: HashMap<String, u32>,
    parking: Vec<String>,
    tables: Vec<crate::config::TableSpec>,
) -> ConfigError {
    let mut failures = 0u32;
    loop {
        match check_recorded(&db, &configured, &parking, &tables).await {
            Ok(Some(refused)) => return refused,
            Ok(None) => return std::future::pending().await,
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(error = %e, "partition counts not checked yet: Postgres does not answer; retrying");
                }
                failures = failures.saturating_add(1);
                tokio::time::sleep(outbox_core::backoff::outage_pause(failures, 0.5)).await;
            }
        }
    }
}

/// The session of the relay's connections, from the settings: behind a transaction pooler
/// (`database.pooler = "transaction"`, or `database.prepared_statements = false`) nothing is
/// kept between transactions, and each transaction sets `relay.lease` as its limits.
pub(crate) fn db_session(settings: &Settings) -> db::Session {
    db::Session {
        mode: match settings.transaction_pooled() {
            true => db::SessionMode::TransactionPooled,
            false => db::SessionMode::Direct,
        },
        lease: settings.relay.lease,
    }
}

/// The relay's pool and the admin server's, in the session mode the settings name (behind a
/// pooler in transaction mode nothing is kept in a session between transactions).
fn open_databases(settings: &Settings, url: &str) -> (db::Db, db::Db) {
    let session = db_session(settings);
    if !settings.database.prepared_statements && !settings.poll_only() {
        tracing::warn!(
            "database.prepared_statements = false without relay.poll_only: behind a pooler in \
             transaction mode LISTEN cannot work, set OUTBOX__DATABASE__POOLER=transaction"
        );
    }
    // Validation keeps pool_size >= relay.workers + 2, so the relay keeps a connection per
    // claim worker.
    let relay_size = settings
        .database
        .pool_size
        .saturating_sub(db::pool::ADMIN_CONNECTIONS)
        .max(1);
    // One log of connection failures for both pools (and the listener, through the relay's).
    let log = db::pool::ConnectLog::default();
    let relay_db = db::pool::build(url, relay_size, session, Drivers::Caller, &log);
    let admin_db = db::pool::build(
        url,
        db::pool::ADMIN_CONNECTIONS,
        session,
        Drivers::Dedicated,
        &log,
    );
    (relay_db, admin_db)
}

/// The Redis publisher of the settings (lazy: nothing connects yet); `traced`: it makes
/// publish spans (spans are exported).
pub(crate) fn open_publisher(settings: &Settings, traced: bool) -> anyhow::Result<Publisher> {
    let redis_tls = settings
        .redis
        .tls_files()
        .map_err(|e| anyhow::anyhow!(e.0))?;
    let conn = connect::connect(&settings.redis, redis_tls.as_ref()).context("redis.url")?;
    Ok(Publisher::new(
        conn,
        PublisherConfig {
            stream_prefix: settings.redis.stream_prefix.clone(),
            dedup_window: settings.redis.dedup_window,
            max_payload_bytes: settings.redis.max_payload_bytes,
            maxlen: settings.redis.maxlen,
            timeout: settings.redis.timeout,
            durability: Durability {
                replicas: settings.redis.wait_replicas,
                fsync: settings.redis.wait_fsync,
                timeout: settings.redis.wait_timeout,
            },
            traced,
            envelopes: Envelopes {
                default: settings.redis.envelope,
                topics: settings.configured_envelopes(),
                source: settings.redis.cloudevents_source.clone(),
            },
        },
    ))
}

/// Known topics' counters are in the first scrape; if Postgres is not there yet, the backlog
/// sampler registers them once it is.
async fn register_known_topics(state: &AdminState) {
    let registered = tokio::time::timeout(
        Duration::from_secs(2),
        state.db.unit(relay::stats::register_topics),
    )
    .await;
    if !matches!(registered, Ok(Ok(()))) {
        tracing::debug!("topics not registered before the first scrape: Postgres not ready");
    }
}

/// An actor died where its supervisor could not restart it: the process ends with
/// [`ActorLost::EXIT_CODE`] so that its orchestrator restarts it.
#[derive(Debug, thiserror::Error)]
#[error("the {0} actor died; exiting so that the replica is restarted")]
pub struct ActorLost(pub crate::telemetry::ActorName);

impl ActorLost {
    /// `EX_SOFTWARE`: an internal error.
    pub const EXIT_CODE: u8 = 70;
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
