//! The relay's actors by name: one [`ActorName`] per kind of actor, used by the watchdog, the
//! panic and restart logs and the `outbox_actor_panics_total{actor}` label, so a name seen in
//! a log line is the one to look for in the metrics.

/// A kind of actor of the relay (and of the admin server's readiness check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorName {
    /// Runs the claim cycles.
    Claimer,
    /// Publishes one topic's share of each batch (one actor per topic).
    Dispatcher,
    /// Wakes the claimer when a planned retry comes due.
    RetryScheduler,
    /// LISTENs for the producers' NOTIFY.
    Listener,
    /// Deletes old published rows.
    Retention,
    /// Records this replica in `outbox_replicas`.
    Heartbeat,
    /// Samples the backlog gauges.
    Backlog,
    /// Samples and trims declared consumer groups.
    Groups,
    /// Pings Postgres and Redis for `/readyz`.
    Readiness,
    /// Saves how far each stream reached (`outbox_stream_marks`).
    Marks,
    /// Records the topics met in `outbox_topics`.
    Registrar,
    /// Unlinks retired dedup sets.
    Sweeper,
}

impl ActorName {
    /// Every actor kind, for counters that must exist from the first scrape.
    pub const ALL: [ActorName; 12] = [
        ActorName::Claimer,
        ActorName::Dispatcher,
        ActorName::RetryScheduler,
        ActorName::Listener,
        ActorName::Retention,
        ActorName::Heartbeat,
        ActorName::Backlog,
        ActorName::Groups,
        ActorName::Readiness,
        ActorName::Marks,
        ActorName::Registrar,
        ActorName::Sweeper,
    ];

    /// The name in logs and in the `actor` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorName::Claimer => "claimer",
            ActorName::Dispatcher => "dispatcher",
            ActorName::RetryScheduler => "retry",
            ActorName::Listener => "listener",
            ActorName::Retention => "retention",
            ActorName::Heartbeat => "heartbeat",
            ActorName::Backlog => "backlog",
            ActorName::Groups => "groups",
            ActorName::Readiness => "readiness",
            ActorName::Marks => "marks",
            ActorName::Registrar => "registrar",
            ActorName::Sweeper => "sweeper",
        }
    }
}

impl std::fmt::Display for ActorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
