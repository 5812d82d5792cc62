//! A replica's side of the cluster-wide cap on concurrent claim transactions
//! (`relay.cluster_claims`, advisory-lock slots taken by `db::outbox::take_claim_slot`).
//!
//! More claim transactions than the database has cores to run them only slow each other
//! down, so extra replicas can drain slower than one. With a cap, extra replicas stand by and
//! take a slot as soon as one frees.
//! A replica that hangs inside its transactions keeps its slots until Postgres ends them after
//! `relay.lease`; when a slot's holder has been in its transaction for [`SLOT_PATIENCE`] (a
//! healthy cycle takes milliseconds), the others claim without a slot meanwhile.

use std::time::Duration;

use diesel_async::AsyncPgConnection;

use crate::db::outbox::{self, Slot};
use crate::db::DbError;

/// How long a slot's holder may stay in one transaction before the others stop waiting for it.
pub const SLOT_PATIENCE: Duration = Duration::from_secs(2);

/// The cluster-wide cap as this replica applies it.
#[derive(Clone, Copy, Debug)]
pub struct SlotGate {
    /// Slots in the cluster; 0: no cap.
    pub slots: i32,
}

impl SlotGate {
    /// A gate over `slots` cluster-wide slots (0: no cap).
    pub fn new(slots: i32) -> Self {
        SlotGate { slots }
    }

    /// Opens a claim transaction: tunes it (`outbox::tune_relay_transaction`) and takes a
    /// slot, in one statement; false when the cycle should wait for its next wake.
    pub async fn admit(&self, c: &mut AsyncPgConnection) -> Result<bool, DbError> {
        if self.slots <= 0 {
            outbox::tune_relay_transaction(c).await?;
            return Ok(true);
        }
        Ok(
            match outbox::take_claim_slot(c, self.slots, SLOT_PATIENCE).await? {
                Slot::Taken => true,
                Slot::Busy => false,
                Slot::HolderStuck => {
                    tracing::debug!("a claim slot's holder looks hung: claiming without a slot");
                    true
                }
            },
        )
    }
}
