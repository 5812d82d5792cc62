//! Whether a cycle may mark its batch published while the batch is still being published.
//!
//! A cycle spends about as long in Redis as in the mark that follows it. Running the mark
//! beside the scripts, in the same transaction, hides the shorter of the two. That is only
//! right when every event reaches its stream: an event that fails must stay pending. So the
//! overlapped mark runs after a savepoint; a cycle that meets a failing event undoes the mark
//! alone and marks what reached its stream, keeping its row locks (so nobody else claims the
//! batch and finds this cycle's appends in the stream). After such a failure the relay stays
//! careful for a while, marking after the publish: a poisoned batch is usually followed by
//! more of the same, and each undone mark is a wasted write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the relay stays careful after an overlapped cycle met a failure.
pub const CAREFUL_FOR: Duration = Duration::from_secs(5);

/// Shared by a claimer's workers; cheap to clone.
#[derive(Clone, Debug)]
pub struct Overlap {
    epoch: Instant,
    /// Milliseconds since `epoch` until which cycles publish first; 0 while never careful.
    careful_until_ms: Arc<AtomicU64>,
    enabled: bool,
}

impl Overlap {
    /// Overlap allowed (`enabled`) or never.
    pub fn new(enabled: bool) -> Self {
        Overlap {
            epoch: Instant::now(),
            careful_until_ms: Arc::new(AtomicU64::new(0)),
            enabled,
        }
    }

    /// May the next cycle mark while it publishes?
    pub fn allowed(&self) -> bool {
        self.enabled && self.now_ms() >= self.careful_until_ms.load(Ordering::Relaxed)
    }

    /// An overlapped cycle met a failing event: publish first for [`CAREFUL_FOR`].
    pub fn be_careful(&self) {
        let until = self.now_ms() + CAREFUL_FOR.as_millis() as u64;
        self.careful_until_ms.fetch_max(until, Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_turns_overlap_off_for_a_while_and_disabled_never_overlaps() {
        let overlap = Overlap::new(true);
        assert!(overlap.allowed());
        overlap.clone().be_careful();
        assert!(!overlap.allowed(), "clones share the state");
        assert!(!Overlap::new(false).allowed());
    }
}
