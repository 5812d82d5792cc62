//! A replica's side of the cluster-wide cap on concurrent claim transactions
//! (`relay.cluster_claims`, advisory-lock slots taken by `db::outbox::take_claim_slot`).
//!
//! More claim transactions than the database has cores to run them only slow each other
//! down: on this project's 2-core machine three replicas of two workers drained at 0.9 of one
//! replica's speed. With a cap, extra replicas stand by and take a slot as soon as one frees.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;

use crate::db::{outbox, DbError};

/// How long a replica waits for a claim slot before it claims without one: a replica that
/// hangs inside its transactions (SIGSTOP, a frozen VM) holds its slots until Postgres ends
/// them after `relay.lease`, and the others must not stall that long.
pub const SLOT_PATIENCE: Duration = Duration::from_secs(2);

/// A replica's side of the cluster-wide cap on concurrent claim transactions.
#[derive(Clone, Debug)]
pub struct SlotGate {
    /// Slots in the cluster; 0: no cap.
    pub slots: i32,
    epoch: Instant,
    /// Milliseconds since `epoch` of the first of the current run of failed tries; 0: none.
    failing_since_ms: Arc<AtomicU64>,
}

impl SlotGate {
    /// A gate over `slots` cluster-wide slots (0: no cap).
    pub fn new(slots: i32) -> Self {
        SlotGate {
            slots,
            epoch: Instant::now(),
            failing_since_ms: Default::default(),
        }
    }

    /// Takes a slot for this transaction, or says whether to claim without one.
    pub async fn admit(&self, c: &mut AsyncPgConnection) -> Result<bool, DbError> {
        if self.slots <= 0 || outbox::take_claim_slot(c, self.slots).await? {
            self.failing_since_ms.store(0, Relaxed);
            return Ok(true);
        }
        // +1: 0 means "not failing".
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let since = match self
            .failing_since_ms
            .compare_exchange(0, now, Relaxed, Relaxed)
        {
            Ok(_) => now,
            Err(since) => since,
        };
        let waited = Duration::from_millis(now - since);
        if waited >= SLOT_PATIENCE {
            tracing::debug!(
                ?waited,
                "no claim slot free for a while: claiming without one"
            );
            return Ok(true);
        }
        Ok(false)
    }
}
