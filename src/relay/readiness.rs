//! The background readiness check: pings Postgres (through the admin's pool) and Redis every
//! second, each with a timeout, and leaves the result in `Health`, so `/readyz` answers at once
//! from what it finds there, outage or not. What it finds about Redis's durability and memory
//! it also reports to the [`PublishGate`], which the claim cycle reads.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::db::{Db, DbError};
use crate::publish::Publisher;
use crate::relay::gate::PublishGate;
use crate::relay::health::Health;
use crate::relay::periodic::Job;
use crate::telemetry::ActorName;

/// How often both servers are pinged.
const EVERY: Duration = Duration::from_secs(1);
/// How long a ping may take before its server counts as unreachable.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// The check's pool, Redis connection and where it writes.
#[derive(Clone)]
pub struct ReadinessCheck {
    /// The admin's pool: the relay's may be busy with claims.
    pub db: Db,
    /// For the Redis ping.
    pub publisher: Publisher,
    /// Where the result goes.
    pub health: Arc<Health>,
    /// Where the durability and memory verdicts go.
    pub gate: PublishGate,
    /// `redis.max_memory_ratio`: above it, publishing holds.
    pub max_memory_ratio: f64,
    /// `database.wait_standbys`: when set, the relay's role must read the standbys' progress.
    pub wait_standbys: u32,
}

/// Whether `database.wait_standbys` can be honoured: the relay's role reads the standbys'
/// progress. Logs once when it turns either way, naming the setting and the grant; a Postgres
/// that does not answer keeps the last verdict (its ping says it is away).
async fn standbys_ok(check: &ReadinessCheck) -> bool {
    if check.wait_standbys == 0 {
        return true;
    }
    let was = !check.gate.standbys_held();
    let Ok(Ok((role, sees))) = tokio::time::timeout(
        PING_TIMEOUT,
        check.db.unit(crate::db::standbys::can_read_progress),
    )
    .await
    else {
        return was;
    };
    let refused = (!sees).then(|| format!(
        "database.wait_standbys is {} but role {role} cannot read the standbys' progress in pg_stat_replication: GRANT pg_monitor TO {role}; not ready, nothing is published",
        check.wait_standbys
    ));
    if let Some(why) = &refused {
        if was {
            tracing::error!(setting = "database.wait_standbys", "{why}");
        }
    } else if !was {
        tracing::info!("the standbys' progress is readable: publishing goes on");
    }
    check.gate.report_standbys(refused.clone());
    refused.is_none()
}

async fn postgres_ok(db: &Db) -> bool {
    matches!(
        tokio::time::timeout(PING_TIMEOUT, db.ping()).await,
        Ok(Ok(()))
    )
}

/// Whether Redis can confirm writes as the settings ask; logs once when it turns either way,
/// naming the setting, so a misconfigured Redis gives one line, not one a second.
async fn durability_ok(check: &ReadinessCheck) -> bool {
    let result = check.publisher.check_durability().await;
    check.gate.report_durability(result.clone());
    let was = check.health.readiness().durability;
    match &result {
        Err(e) if was => {
            tracing::error!(setting = e.setting, reason = %e.reason, "{e}; not ready, nothing is marked published")
        }
        Ok(()) if !was => tracing::info!("Redis confirms writes as the settings ask again"),
        _ => {}
    }
    result.is_ok()
}

/// Share of the limit below which a hold for memory ends: a hold does not flap on and off
/// around the limit.
const RELEASE_BELOW: f64 = 0.98;

/// Whether Redis has room: holds publishing above `redis.max_memory_ratio` of `maxmemory`
/// (and lets it go once below 98% of that), logging each change once. A Redis that does not
/// answer keeps the last verdict: its ping already says it is away.
async fn memory_ok(check: &ReadinessCheck) -> bool {
    let was = check.health.readiness().memory;
    let Ok(ratio) = check.publisher.memory_ratio().await else {
        return was;
    };
    let limit = check.max_memory_ratio;
    let ratio_now = ratio.unwrap_or(0.0);
    let ok = match was {
        true => ratio_now < limit,
        false => ratio_now < limit * RELEASE_BELOW,
    };
    crate::telemetry::redis_memory(ratio_now, !ok);
    if ok != was {
        if ok {
            tracing::info!(
                ratio = ratio_now,
                "Redis has room again: publishing resumes"
            );
            check.gate.report_memory(None);
        } else {
            let why = format!(
                "Redis uses {:.0}% of its maxmemory, above redis.max_memory_ratio ({:.0}%): publishing holds until it has room",
                ratio_now * 100.0,
                limit * 100.0
            );
            tracing::error!(ratio = ratio_now, "{why}");
            check.gate.report_memory(Some(why));
        }
    }
    ok
}

impl Job for ReadinessCheck {
    const ACTOR: ActorName = ActorName::Readiness;
    type Error = DbError;

    fn interval(&self) -> Duration {
        EVERY
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let me = self.clone();
        async move {
            let (postgres, redis) = futures::join!(postgres_ok(&me.db), me.publisher.ping());
            let durable = (!redis || durability_ok(&me).await) && standbys_ok(&me).await;
            let roomy = !redis || memory_ok(&me).await;
            me.health.checked(postgres, redis);
            me.health.set_durability(durable);
            me.health.set_memory(roomy);
            Ok(())
        }
        .boxed()
    }
}
