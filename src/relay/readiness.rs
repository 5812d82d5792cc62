//! The background readiness check: pings Postgres (through the admin's pool) and Redis every
//! second, each with a timeout, and leaves the result in `Health`, so `/readyz` answers at once
//! from what it finds there, outage or not.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::db::{Db, DbError};
use crate::publish::Publisher;
use crate::relay::actors::ActorName;
use crate::relay::health::Health;
use crate::relay::periodic::Job;

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
            let durable = !redis || durability_ok(&me).await;
            me.health.checked(postgres, redis);
            me.health.set_durability(durable);
            Ok(())
        }
        .boxed()
    }
}
