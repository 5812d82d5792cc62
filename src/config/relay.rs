//! `[relay]`: the claim loop: the lease, the batch sizes, the workers, how the relay learns of
//! new events, and when it counts as stalled. The lease bounds every publish, so the checks
//! that relate a Redis timing to it are here, after the lease's own.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::database::Pooler;
use super::rule::{human, positive, within, Rule};
use super::Settings;

/// The shortest default `relay.stall_after`: longer than the claim loop's longest outage pause.
pub(super) const MIN_STALL_AFTER: Duration = Duration::from_secs(10);

/// The claim loop.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelaySettings {
    /// How long a claim lasts before another replica may take the event: the claim
    /// transaction of a replica that hangs or loses its network is ended by Postgres after this.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// Events claimed per transaction.
    pub batch_size: u32,
    /// Bytes of payload and headers claimed per transaction (the first event always goes,
    /// however big): bounds the relay's memory when events are large.
    pub batch_bytes: u64,
    /// Claim transactions a replica runs at once while there is a backlog (one when idle).
    pub workers: u32,
    /// Mark a batch published while its publish runs, in the same transaction (see
    /// `relay::overlap`); off publishes first, then marks what reached its stream.
    pub overlap_mark: bool,
    /// While events arrive faster than this (events/s), producers stop notifying and the
    /// relays poll every 5 ms (see `relay::quiet`); 0 keeps NOTIFY always.
    pub quiet_above: u32,
    /// Claim transactions running at once across all replicas (advisory-lock slots); 0: no
    /// cap. More than the database's cores can run only slow each other down.
    pub cluster_claims: u32,
    /// Fallback poll interval when no notification arrives (also the retry-due check).
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Do not LISTEN (for PgBouncer in transaction pooling mode): poll only.
    pub poll_only: bool,
    /// How often a replica writes its heartbeat.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// `/healthz` fails when no claim cycle has ended for this long while events are pending:
    /// the process runs but relays nothing, and a liveness probe should restart it. Defaults
    /// to twice the longer of `relay.lease` and `relay.poll_interval` (at least 10s).
    #[serde(with = "humantime_serde")]
    pub stall_after: Duration,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            lease: Duration::from_secs(30),
            batch_size: 1000,
            batch_bytes: 4 * 1024 * 1024,
            workers: 2,
            overlap_mark: true,
            quiet_above: 1500,
            cluster_claims: 2,
            poll_interval: Duration::from_secs(1),
            poll_only: false,
            heartbeat_interval: Duration::from_secs(5),
            stall_after: Duration::from_secs(60),
        }
    }
}

impl Settings {
    /// Whether the relay polls instead of LISTENing: `relay.poll_only`, or a transaction
    /// pooler, through which LISTEN cannot work.
    pub fn poll_only(&self) -> bool {
        self.relay.poll_only || self.database.pooler == Pooler::Transaction
    }
}

/// The checks of `[relay]`, and of the Redis timings that must fit within the lease.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["relay.lease"],
        check: |s| {
            if s.relay.lease < Duration::from_secs(1) {
                return Err(format!("must be at least 1s, not {}", human(s.relay.lease)));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.dedup_window", "relay.lease"],
        check: |s| {
            if s.redis.dedup_window < s.relay.lease * 2 {
                return Err(format!(
                    "redis.dedup_window ({}) must be at least twice relay.lease ({}): a claim abandoned by a crashed replica is retaken within the lease, and its second XADD must still be refused; use a window of {} or more, or a shorter lease",
                    human(s.redis.dedup_window),
                    human(s.relay.lease),
                    human(s.relay.lease * 2)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.wait_timeout", "redis.timeout", "relay.lease"],
        check: |s| {
            positive(s.redis.wait_timeout)?;
            let waits = s.redis.wait_replicas > 0 || s.redis.wait_fsync;
            if waits && s.redis.wait_timeout + s.redis.timeout >= s.relay.lease {
                return Err(format!(
                    "redis.wait_timeout ({}) plus redis.timeout ({}) must be shorter than relay.lease ({}): the wait for replicas is part of the publish, which must end within the claim",
                    human(s.redis.wait_timeout),
                    human(s.redis.timeout),
                    human(s.relay.lease)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.timeout", "relay.lease"],
        check: |s| {
            if s.redis.timeout >= s.relay.lease {
                return Err(format!(
                    "redis.timeout ({}) must be shorter than relay.lease ({}): a publish must end within the claim; use a timeout below {} (half of it is the default), or a longer lease",
                    human(s.redis.timeout),
                    human(s.relay.lease),
                    human(s.relay.lease)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["relay.stall_after", "relay.lease"],
        check: |s| {
            let least = s.relay.lease.max(s.relay.poll_interval);
            if s.relay.stall_after <= least {
                return Err(format!(
                    "relay.stall_after ({}) must be longer than relay.lease and relay.poll_interval ({}): a healthy cycle may take that long",
                    human(s.relay.stall_after),
                    human(least)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["relay.batch_size"],
        check: |s| within(s.relay.batch_size, 1, 10_000),
    },
    Rule {
        settings: &["relay.batch_bytes"],
        check: |s| within(s.relay.batch_bytes, 1024, 1024 * 1024 * 1024),
    },
    Rule {
        settings: &["relay.cluster_claims"],
        check: |s| within(s.relay.cluster_claims, 0, 1024),
    },
    Rule {
        settings: &["relay.workers"],
        check: |s| within(s.relay.workers, 1, 32),
    },
    Rule {
        settings: &["relay.poll_interval"],
        check: |s| positive(s.relay.poll_interval),
    },
    Rule {
        settings: &["relay.heartbeat_interval"],
        check: |s| positive(s.relay.heartbeat_interval),
    },
];

#[cfg(test)]
mod tests {
    use super::super::rules::check;
    use super::*;

    #[test]
    fn a_relation_is_reported_under_the_setting_the_user_gave() {
        let mut s = Settings::default();
        s.redis.timeout = Duration::from_secs(40);
        let err = check(&s, &|k| k == "redis.timeout").expect_err("timeout above lease");
        assert_eq!(err.setting, "redis.timeout");
        let err = check(&s, &|k| k == "relay.lease").expect_err("timeout above lease");
        assert_eq!(err.setting, "relay.lease");
        assert!(err.message.contains("below 30s"), "{}", err.message);
    }

    #[test]
    fn ranges_say_what_works() {
        let mut s = Settings::default();
        s.relay.workers = 0;
        let err = check(&s, &|_| true).expect_err("no workers");
        assert_eq!(err.setting, "relay.workers");
        assert_eq!(err.message, "must be 1..=32, not 0");
    }
}
