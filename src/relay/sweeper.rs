//! The dedup sweeper: unlinks the retired dedup sets of every topic this replica has met (see
//! `publish::keys`), which Redis then frees on its background thread. A publish unlinks its
//! stream's retired set as it goes; the sweeper is for a topic whose traffic stopped, so no
//! publish would.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, TryFutureExt};

use super::periodic::Job;
use super::topics::Topics;
use crate::publish::{keys, PublishError};
use crate::telemetry::ActorName;

/// The sweeper's topics (and through them, the publisher).
#[derive(Clone)]
pub struct DedupSweeper {
    /// The topics met, with the publisher.
    pub topics: Topics,
}

/// Sweeps every topic met; returns how many retired sets existed.
pub async fn run_once(sweeper: DedupSweeper) -> Result<usize, PublishError> {
    let publisher = sweeper.topics.publisher();
    let mut unlinked = 0;
    for seen in sweeper.topics.seen() {
        let n = publisher.sweep(&seen.topic, seen.partitions).await?;
        if n > 0 {
            tracing::debug!(topic = %seen.topic, sets = n, "retired dedup sets unlinked");
        }
        unlinked += n;
    }
    Ok(unlinked)
}

impl Job for DedupSweeper {
    const ACTOR: ActorName = ActorName::Sweeper;
    // Redis away: the claim cycles log the outage; the next tick tries again.
    const QUIET: bool = true;
    type Error = PublishError;

    fn interval(&self) -> Duration {
        keys::sweep_every(self.topics.publisher().config().dedup_window)
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), PublishError>> {
        run_once(self.clone()).map_ok(drop).boxed()
    }
}
