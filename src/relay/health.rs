//! Shared health state: what the claim loop last saw, and whether the process is stopping.
//! Readiness also pings Postgres and Redis itself (see `admin::health`); this adds what only
//! the relay knows.

use std::sync::atomic::{AtomicBool, Ordering};

/// Flags read by `/readyz`.
#[derive(Debug)]
pub struct Health {
    relay_ok: AtomicBool,
    stopping: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            relay_ok: AtomicBool::new(true),
            stopping: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// The last claim cycle succeeded (true) or hit an outage (false).
    pub fn set_relay_ok(&self, ok: bool) {
        self.relay_ok.store(ok, Ordering::Relaxed);
    }

    /// The last claim cycle succeeded.
    pub fn relay_ok(&self) -> bool {
        self.relay_ok.load(Ordering::Relaxed)
    }

    /// Shutdown has begun: readiness turns off so traffic and probes move elsewhere.
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Shutdown has begun.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}
