//! The heartbeat: renews this consumer's membership, takes the partitions it should own when
//! their leases are free, renews the leases it holds, and marks those it should give up. Runs
//! beside the loop, on its own connection, for as long as the consumer runs; a clean stop
//! leaves the group ([`leave`]) so the others take over at once instead of after a lease.
//! What the lease replies change is decided by [`super::leases`]; this module sends the
//! calls and logs the changes.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;

use outbox_core::backoff::ErrorLog;
use outbox_core::{keys, RedisConn};

use super::leases::{self, Change, Reply};
use super::scripts::{self, LeaseOp};
use super::{assign, Fleet};

/// How often the heartbeat runs: often enough that a join or a leave is seen within a
/// second, and at least six times per lease.
pub(crate) fn beat_every(lease: Duration) -> Duration {
    (lease / 6).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

/// How soon the heartbeat runs again while a partition it should own is still another's, or
/// right after joining: a hand-over then takes a fraction of a second, not a whole beat.
const EAGER: Duration = Duration::from_millis(100);

/// Runs the heartbeat forever (the consumer drops it when it stops). It also runs at once
/// when the topics change.
pub(crate) async fn heartbeat(fleet: &Fleet, mut conn: RedisConn) -> Infallible {
    let every = beat_every(fleet.lease);
    let mut errors = ErrorLog::new(Duration::from_secs(30));
    loop {
        let next = match beat(fleet, &mut conn).await {
            Ok(Waiting::No) => {
                errors.reset();
                every
            }
            Ok(Waiting::Yes) => {
                errors.reset();
                every.min(EAGER)
            }
            Err(e) => {
                if let Some(suppressed) = errors.admit(Instant::now()) {
                    tracing::warn!(error = %e, suppressed, group = %fleet.group, consumer = %fleet.me, "could not renew partition leases; partitions whose lease runs out stop being handled");
                }
                every
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = fleet.changed.notified() => {}
        }
    }
}

/// Whether a beat left this consumer waiting for partitions it should own.
enum Waiting {
    No,
    Yes,
}

/// Notes a topic whose partition count in the partitions hash is not the one the loop
/// resolved (the relay records it when it first publishes the topic, and `repartition`
/// changes it).
async fn check_counts(fleet: &Fleet, conn: &mut RedisConn) -> redis::RedisResult<()> {
    let counts = fleet.state().counts.clone();
    if counts.is_empty() {
        return Ok(());
    }
    let hash = keys::partitions_hash(&fleet.prefix);
    let mut pipe = redis::pipe();
    for (topic, _) in &counts {
        pipe.cmd("HGET").arg(&hash).arg(topic);
    }
    let now: Vec<Option<u32>> = pipe.query_async(conn).await?;
    let changed = counts
        .iter()
        .zip(now)
        .any(|((_, was), now)| now.unwrap_or(1).max(1) != *was);
    if changed {
        tracing::info!("a topic's partition count changed: reading its streams anew");
        fleet.state().stale = true;
    }
    Ok(())
}

/// One round over every divided topic.
async fn beat(fleet: &Fleet, conn: &mut RedisConn) -> redis::RedisResult<Waiting> {
    check_counts(fleet, conn).await?;
    let topics = fleet.state().topics.clone();
    let mut failure = None;
    let mut waiting = Waiting::No;
    for topic in topics {
        let sent = Instant::now();
        let members = scripts::join(conn, &topic.members, &fleet.me, fleet.lease_ms()).await?;
        if fleet.state().joined.insert(topic.topic.clone()) {
            // Just joined: the others starting now join too before anyone takes leases.
            waiting = Waiting::Yes;
            continue;
        }
        let count = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
        let targets: HashSet<u32> = assign::targets(&members, &fleet.me, count)
            .into_iter()
            .collect();
        let streams: Vec<Arc<str>> = topic.partitions.iter().map(|p| p.stream.clone()).collect();
        let asks = leases::asks(&fleet.state().held, &streams, &targets);
        let replies = join_all(asks.iter().map(|&(p, op)| {
            let mut conn = conn.clone();
            let keys = &topic.partitions[p as usize];
            async move {
                scripts::lease(
                    &mut conn,
                    &keys.owner,
                    &keys.epoch,
                    &fleet.me,
                    fleet.lease_ms(),
                    op,
                )
                .await
            }
        }))
        .await;
        let replies: Vec<((u32, LeaseOp), Reply)> = asks
            .iter()
            .zip(replies)
            .map(|(&ask, reply)| match reply {
                Ok(epoch) => (ask, Reply::from_script(epoch)),
                Err(e) => {
                    // Not renewed: the lease lapses locally when its time is up.
                    failure = Some(e);
                    (ask, Reply::Failed)
                }
            })
            .collect();
        // Trusted from when the calls were sent, not from when the replies came back: the
        // lease's time in Redis started no earlier than that.
        let valid_until = sent + fleet.trust();
        let settled = {
            let mut state = fleet.state();
            leases::settle(&mut state.held, &streams, &targets, &replies, valid_until)
        };
        if settled.waiting {
            waiting = Waiting::Yes;
        }
        for change in settled.changes {
            match change {
                Change::ChangedHands { partition } => {
                    tracing::warn!(topic = %topic.topic, partition, "partition lease changed hands: no longer handled here")
                }
                Change::GivingUp { partition } => {
                    tracing::info!(topic = %topic.topic, partition, members = members.len(), "giving up partition for a rebalance, after the batch in hand")
                }
                Change::Lost { partition } => {
                    tracing::warn!(topic = %topic.topic, partition, "partition lease lost (it ran out): no longer handled here")
                }
                Change::Took { partition, epoch } => {
                    tracing::info!(topic = %topic.topic, partition, epoch, members = members.len(), "took partition")
                }
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(waiting),
    }
}

/// A clean stop: leaves the members sets first (so the others count without this consumer),
/// then releases every lease held.
pub(crate) async fn leave(fleet: &Fleet, conn: &mut RedisConn) -> redis::RedisResult<()> {
    let (leases, members) = fleet.everything();
    for key in &members {
        scripts::leave(conn, key, &fleet.me).await?;
    }
    for (owner, epoch) in &leases {
        scripts::lease(
            conn,
            owner,
            epoch,
            &fleet.me,
            fleet.lease_ms(),
            LeaseOp::Release,
        )
        .await?;
    }
    let mut state = fleet.state();
    state.held.clear();
    state.joined.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_runs_six_times_per_lease_at_most_every_second() {
        assert_eq!(beat_every(Duration::from_secs(30)), Duration::from_secs(1));
        assert_eq!(
            beat_every(Duration::from_secs(3)),
            Duration::from_millis(500)
        );
        assert_eq!(
            beat_every(Duration::from_millis(100)),
            Duration::from_millis(20)
        );
    }
}
