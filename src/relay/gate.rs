//! The publish gate: whether anything may be sent to Redis now. The readiness job reports to
//! it what it found (Redis cannot confirm writes as `redis.wait_fsync` asks, or is fuller than
//! `redis.max_memory_ratio`, or the relay's role cannot read the standbys' progress that
//! `database.wait_standbys` waits for); the claim cycle reads it before it claims and again before it
//! publishes, and claims or sends nothing while it is held. The publisher itself knows
//! nothing of it: one value, read in one place, decides.

use std::sync::{Arc, Mutex};

use crate::publish::durability::Unsupported;

/// Whether publishing may go on, shared by the readiness job (which reports) and the claim
/// cycle (which reads). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PublishGate {
    held: Arc<Mutex<Held>>,
}

/// Why the gate is held; open when both are `None`.
#[derive(Debug, Default)]
struct Held {
    /// Redis cannot confirm writes as the settings ask (or was not checked yet).
    durability: Option<Unsupported>,
    /// Redis is too full: why.
    memory: Option<String>,
    /// `database.wait_standbys` cannot be honoured (the role cannot read the standbys'
    /// progress): why.
    standbys: Option<String>,
}

impl PublishGate {
    /// A gate for a relay that asks Redis for `WAITAOF` (`wait_fsync`): held until the first
    /// check says Redis can, since an entry written before could never be confirmed.
    pub fn new(wait_fsync: bool) -> Self {
        let unchecked = wait_fsync.then(|| Unsupported {
            setting: "redis.wait_fsync",
            reason: "not checked yet".into(),
        });
        PublishGate {
            held: Arc::new(Mutex::new(Held {
                durability: unchecked,
                memory: None,
                standbys: None,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The durability check's latest verdict.
    pub fn report_durability(&self, verdict: Result<(), Unsupported>) {
        self.lock().durability = verdict.err();
    }

    /// The memory check's latest verdict: `Some(why)` while Redis is too full.
    pub fn report_memory(&self, full: Option<String>) {
        self.lock().memory = full;
    }

    /// The standbys check's latest verdict: `Some(why)` while `database.wait_standbys` cannot
    /// be honoured.
    pub fn report_standbys(&self, refused: Option<String>) {
        self.lock().standbys = refused;
    }

    /// Whether the standbys check holds it now.
    pub fn standbys_held(&self) -> bool {
        self.lock().standbys.is_some()
    }

    /// Why nothing may be sent now, if anything.
    pub fn held(&self) -> Option<String> {
        let held = self.lock();
        if let Some(refused) = &held.durability {
            return Some(refused.to_string());
        }
        held.standbys.clone().or_else(|| held.memory.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_waiting_for_fsync_is_held_until_the_first_check() {
        let gate = PublishGate::new(true);
        assert!(gate
            .held()
            .is_some_and(|why| why.contains("redis.wait_fsync")));
        gate.report_durability(Ok(()));
        assert_eq!(gate.held(), None);
        assert_eq!(PublishGate::new(false).held(), None);
    }

    #[test]
    fn either_check_holds_it_and_both_must_clear() {
        let gate = PublishGate::new(false);
        gate.report_memory(Some("full".into()));
        gate.report_durability(Err(Unsupported {
            setting: "redis.wait_fsync",
            reason: "no appendonly".into(),
        }));
        assert!(gate.held().is_some_and(|why| why.contains("no appendonly")));
        gate.report_durability(Ok(()));
        assert_eq!(gate.held().as_deref(), Some("full"));
        gate.report_memory(None);
        assert_eq!(gate.held(), None);
    }
}
