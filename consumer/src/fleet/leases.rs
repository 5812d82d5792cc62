//! The heartbeat's lease bookkeeping as pure functions: which lease calls to send for a
//! divided topic ([`asks`]), and what their replies change in the leases this consumer holds
//! ([`settle`]), with what the heartbeat should log. The heartbeat ([`super::beat`]) does the
//! I/O around them; the property tests below run them against a model of the lease script.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::scripts::LeaseOp;
use super::Held;

/// The lease script's answer for one partition, as the bookkeeping reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// This consumer holds the lease, under this epoch (renewed, or newly taken).
    Held(u64),
    /// Another consumer holds the lease, or (a renewal) this one no longer does.
    Refused,
    /// The call failed: nothing is known, nothing changes; a held lease lapses locally when
    /// its time is up.
    Failed,
}

impl Reply {
    /// The script's integer reply: a positive epoch, else a refusal.
    pub(crate) fn from_script(epoch: i64) -> Reply {
        match u64::try_from(epoch) {
            Ok(epoch) if epoch > 0 => Reply::Held(epoch),
            _ => Reply::Refused,
        }
    }
}

/// What a round changed, for the heartbeat to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// A renewal found another epoch: the lease changed hands, this consumer lost it.
    ChangedHands { partition: u32 },
    /// A held partition is no longer a target: given up after the batch in hand.
    GivingUp { partition: u32 },
    /// A renewal was refused: the lease ran out.
    Lost { partition: u32 },
    /// A free lease was taken under a new epoch.
    Took { partition: u32, epoch: u64 },
}

/// What [`settle`] found besides the changes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    /// In order, what to log.
    pub(crate) changes: Vec<Change>,
    /// A target is still another's: the heartbeat runs again soon.
    pub(crate) waiting: bool,
}

/// The lease calls for one divided topic whose partition `p` is stream `streams[p]`: renew
/// every lease held, take every target not held; nothing for the other partitions.
pub(crate) fn asks(
    held: &HashMap<Arc<str>, Held>,
    streams: &[Arc<str>],
    targets: &HashSet<u32>,
) -> Vec<(u32, LeaseOp)> {
    streams
        .iter()
        .zip(0u32..)
        .filter_map(|(stream, p)| {
            if held.contains_key(stream) {
                Some((p, LeaseOp::Renew))
            } else if targets.contains(&p) {
                Some((p, LeaseOp::Take))
            } else {
                None
            }
        })
        .collect()
}

/// Applies the replies to [`asks`]'s calls (in their order) to the leases held: a renewal
/// under the same epoch extends the local trust to `valid_until` and notes whether the
/// partition is still a target; a renewal refused, or answered with another epoch, forgets
/// the lease; a take that succeeded records the lease under its new epoch, to be handed over
/// before it is read. A partition released by the loop while the calls were out stays
/// released. `valid_until` must come from before the calls were sent (a margin before the
/// lease could run out in Redis), never from when the replies arrived.
pub(crate) fn settle(
    held: &mut HashMap<Arc<str>, Held>,
    streams: &[Arc<str>],
    targets: &HashSet<u32>,
    replies: &[((u32, LeaseOp), Reply)],
    valid_until: Instant,
) -> Settled {
    let mut settled = Settled::default();
    for &((p, op), reply) in replies {
        let Some(stream) = streams.get(p as usize) else {
            continue;
        };
        let keep = targets.contains(&p);
        match (op, reply) {
            (_, Reply::Failed) | (LeaseOp::Release, _) => {}
            (LeaseOp::Renew, Reply::Held(epoch)) => {
                let Some(h) = held.get_mut(stream) else {
                    continue; // released meanwhile by the loop
                };
                if h.epoch != epoch {
                    held.remove(stream);
                    settled.changes.push(Change::ChangedHands { partition: p });
                    continue;
                }
                if h.keep && !keep {
                    settled.changes.push(Change::GivingUp { partition: p });
                }
                h.valid_until = valid_until;
                h.keep = keep;
            }
            (LeaseOp::Renew, Reply::Refused) => {
                if held.remove(stream).is_some() {
                    settled.changes.push(Change::Lost { partition: p });
                }
            }
            (LeaseOp::Take, Reply::Held(epoch)) => {
                settled.changes.push(Change::Took {
                    partition: p,
                    epoch,
                });
                held.insert(
                    stream.clone(),
                    Held {
                        partition: p,
                        epoch,
                        valid_until,
                        keep: true,
                        handed_over: false,
                    },
                );
            }
            // Another consumer still holds it: it gives it up after its batch, or its lease
            // runs out.
            (LeaseOp::Take, Reply::Refused) => settled.waiting = true,
        }
    }
    settled
}

#[cfg(test)]
mod tests {
    //! A fleet of consumers against a model of the lease script (`LEASE` in `scripts.rs`),
    //! in logical milliseconds: each beat sends its calls at one instant, the script runs a
    //! little later, the replies come back later still; consumers join, stop cleanly, crash,
    //! freeze past their lease and resume; the loop gives up what it should no longer hold.

    use super::*;
    use crate::fleet::assign;
    use proptest::prelude::*;
    use std::time::Duration;

    const LEASE_MS: u64 = 3_000;
    /// As `Fleet::trust`: a third of the lease short of its end in Redis.
    const TRUST_MS: u64 = LEASE_MS - LEASE_MS / 3;
    /// The longest a call takes to reach the script: below the trust margin.
    const MAX_DELAY_MS: u64 = 200;

    /// The owner and epoch keys of one partition.
    #[derive(Debug, Default, Clone)]
    struct Keys {
        owner: Option<(usize, u64)>, // (consumer, expires at)
        epoch: u64,
    }

    /// The lease script on one partition's keys at time `now`.
    fn script(keys: &mut Keys, me: usize, op: LeaseOp, now: u64) -> Reply {
        if keys.owner.is_some_and(|(_, until)| until <= now) {
            keys.owner = None;
        }
        let owner = keys.owner.map(|(o, _)| o);
        if op == LeaseOp::Release {
            if owner == Some(me) {
                keys.owner = None;
            }
            return Reply::Refused;
        }
        if owner == Some(me) {
            keys.owner = Some((me, now + LEASE_MS));
            return Reply::from_script(keys.epoch as i64);
        }
        if owner.is_some() || op != LeaseOp::Take {
            return Reply::Refused;
        }
        keys.owner = Some((me, now + LEASE_MS));
        keys.epoch += 1;
        Reply::from_script(keys.epoch as i64)
    }

    struct Consumer {
        name: String,
        held: HashMap<Arc<str>, Held>,
        /// In the members set (alive and not stopped).
        member: bool,
        /// Frozen: sends nothing, handles nothing, until it resumes.
        frozen: bool,
    }

    struct World {
        base: Instant,
        now: u64,
        streams: Vec<Arc<str>>,
        keys: Vec<Keys>,
        consumers: Vec<Consumer>,
    }

    impl World {
        fn new(partitions: u32, consumers: usize) -> World {
            World {
                base: Instant::now(),
                now: 0,
                streams: (0..partitions)
                    .map(|p| Arc::from(format!("s:{p}")))
                    .collect(),
                keys: vec![Keys::default(); partitions as usize],
                consumers: (0..consumers)
                    .map(|i| Consumer {
                        name: format!("c{i}"),
                        held: HashMap::new(),
                        member: true,
                        frozen: false,
                    })
                    .collect(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.base + Duration::from_millis(ms)
        }

        fn members(&self) -> Vec<String> {
            self.consumers
                .iter()
                .filter(|c| c.member)
                .map(|c| c.name.clone())
                .collect()
        }

        /// One heartbeat of consumer `i`: calls sent now, run by the script `delay` later,
        /// settled when the replies are back, then the loop releases what it gives up.
        fn beat(&mut self, i: usize, delay: u64) {
            if !self.consumers[i].member || self.consumers[i].frozen {
                return;
            }
            let sent = self.now;
            let members = self.members();
            let count = self.streams.len() as u32;
            let c = &mut self.consumers[i];
            let targets: HashSet<u32> = assign::targets(&members, &c.name, count)
                .into_iter()
                .collect();
            let calls = asks(&c.held, &self.streams, &targets);
            let replies: Vec<((u32, LeaseOp), Reply)> = calls
                .iter()
                .map(|&(p, op)| {
                    let reply = script(&mut self.keys[p as usize], i, op, sent + delay);
                    ((p, op), reply)
                })
                .collect();
            settle(
                &mut c.held,
                &self.streams,
                &targets,
                &replies,
                self.base + Duration::from_millis(sent + TRUST_MS),
            );
            // The loop: what it should no longer hold goes back after the batch in hand.
            let released: Vec<Arc<str>> = c
                .held
                .iter()
                .filter(|(_, h)| !h.keep)
                .map(|(s, _)| s.clone())
                .collect();
            for stream in released {
                if let Some(h) = c.held.remove(&stream) {
                    script(
                        &mut self.keys[h.partition as usize],
                        i,
                        LeaseOp::Release,
                        sent + delay,
                    );
                }
            }
        }

        /// Who may act on partition `p` now: holders whose trust has not run out.
        fn acting(&self, p: u32) -> Vec<(usize, u64)> {
            let now = self.at(self.now);
            self.consumers
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.frozen)
                .filter_map(|(i, c)| {
                    let h = c.held.get(&self.streams[p as usize])?;
                    (now < h.valid_until).then_some((i, h.epoch))
                })
                .collect()
        }

        fn check_one_owner_per_epoch(&self) -> Result<(), TestCaseError> {
            for p in 0..self.streams.len() as u32 {
                let acting = self.acting(p);
                prop_assert!(
                    acting.len() <= 1,
                    "partition {p} at {} ms: acted on by {acting:?}",
                    self.now
                );
                // Whoever holds a partition under one epoch, frozen or not, is alone with it.
                let mut epochs: Vec<u64> = self
                    .consumers
                    .iter()
                    .filter_map(|c| c.held.get(&self.streams[p as usize]).map(|h| h.epoch))
                    .collect();
                let all = epochs.len();
                epochs.sort_unstable();
                epochs.dedup();
                prop_assert_eq!(
                    all,
                    epochs.len(),
                    "partition {} held twice under one epoch",
                    p
                );
            }
            Ok(())
        }
    }

    /// What happens between two instants of the fleet's life.
    #[derive(Debug, Clone)]
    enum Step {
        Beat { consumer: usize, delay: u64 },
        Advance(u64),
        Join(usize),
        Stop(usize),
        Crash(usize),
        Freeze(usize),
        Resume(usize),
    }

    impl Step {
        /// The same step, its consumer one of the first `consumers`.
        fn among(&self, consumers: usize) -> Step {
            match self {
                Step::Beat { consumer, delay } => Step::Beat {
                    consumer: consumer % consumers,
                    delay: *delay,
                },
                Step::Join(i) => Step::Join(i % consumers),
                Step::Stop(i) => Step::Stop(i % consumers),
                Step::Crash(i) => Step::Crash(i % consumers),
                Step::Freeze(i) => Step::Freeze(i % consumers),
                Step::Resume(i) => Step::Resume(i % consumers),
                Step::Advance(ms) => Step::Advance(*ms),
            }
        }
    }

    fn step(consumers: usize) -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0..consumers, 0..MAX_DELAY_MS).prop_map(|(consumer, delay)| Step::Beat { consumer, delay }),
            3 => (1..LEASE_MS).prop_map(Step::Advance),
            1 => (0..consumers).prop_map(Step::Join),
            1 => (0..consumers).prop_map(Step::Stop),
            1 => (0..consumers).prop_map(Step::Crash),
            1 => (0..consumers).prop_map(Step::Freeze),
            1 => (0..consumers).prop_map(Step::Resume),
        ]
    }

    fn apply(world: &mut World, step: &Step) {
        match *step {
            Step::Beat { consumer, delay } => world.beat(consumer, delay),
            Step::Advance(ms) => world.now += ms,
            Step::Join(i) => {
                let c = &mut world.consumers[i];
                if !c.member {
                    c.member = true;
                    c.frozen = false;
                }
            }
            // A clean stop: out of the members, every lease released.
            Step::Stop(i) => {
                let c = &mut world.consumers[i];
                c.member = false;
                for (_, h) in c.held.drain() {
                    script(
                        &mut world.keys[h.partition as usize],
                        i,
                        LeaseOp::Release,
                        world.now,
                    );
                }
            }
            // A crash: out of the members (its membership runs out), its leases left to
            // run out, its process gone (a restart is a new process).
            Step::Crash(i) => {
                let c = &mut world.consumers[i];
                c.member = false;
                c.held.clear();
            }
            Step::Freeze(i) => world.consumers[i].frozen = true,
            Step::Resume(i) => world.consumers[i].frozen = false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the fleet goes through, a partition is never acted on by two consumers at
        /// once, and never held by two under one epoch.
        #[test]
        fn no_two_owners_of_one_partition_at_one_epoch(
            partitions in 1u32..12,
            consumers in 1usize..5,
            steps in prop::collection::vec(step(4), 1..120),
        ) {
            let mut world = World::new(partitions, consumers);
            for s in &steps {
                apply(&mut world, &s.among(consumers));
                world.check_one_owner_per_epoch()?;
            }
        }

        /// After any history, once membership stops changing and every member beats
        /// regularly, each partition has one holder and the members' counts differ by at
        /// most one.
        #[test]
        fn counts_are_within_one_of_each_other_once_stable(
            partitions in 1u32..12,
            consumers in 1usize..5,
            steps in prop::collection::vec(step(4), 0..80),
        ) {
            let mut world = World::new(partitions, consumers);
            for s in &steps {
                apply(&mut world, &s.among(consumers));
            }
            // Stable: nobody frozen, at least one member; beats every sixth of the lease
            // for a few leases, so what a crashed or frozen owner held runs out.
            for c in &mut world.consumers {
                c.frozen = false;
            }
            if world.members().is_empty() {
                world.consumers[0].member = true;
            }
            for _ in 0..(6 * 4) {
                world.now += LEASE_MS / 6;
                for i in 0..consumers {
                    world.beat(i, MAX_DELAY_MS / 2);
                }
                world.check_one_owner_per_epoch()?;
            }
            let members: Vec<usize> = (0..consumers).filter(|&i| world.consumers[i].member).collect();
            for p in 0..partitions {
                prop_assert_eq!(world.acting(p).len(), 1, "partition {} has one holder", p);
            }
            let counts: Vec<usize> = members
                .iter()
                .map(|&i| world.consumers[i].held.len())
                .collect();
            let (lo, hi) = (counts.iter().min().copied(), counts.iter().max().copied());
            prop_assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "counts {:?}", counts);
            for i in (0..consumers).filter(|i| !members.contains(i)) {
                prop_assert!(world.consumers[i].held.is_empty(), "a stopped consumer holds nothing");
            }
        }
    }

    #[test]
    fn a_renewal_under_another_epoch_forgets_the_lease_and_a_refused_take_waits() {
        let base = Instant::now();
        let streams: Vec<Arc<str>> = vec![Arc::from("a"), Arc::from("b")];
        let mut held = HashMap::from([(
            streams[0].clone(),
            Held {
                partition: 0,
                epoch: 4,
                valid_until: base,
                keep: true,
                handed_over: true,
            },
        )]);
        let targets = HashSet::from([0, 1]);
        assert_eq!(
            asks(&held, &streams, &targets),
            vec![(0, LeaseOp::Renew), (1, LeaseOp::Take)]
        );
        let settled = settle(
            &mut held,
            &streams,
            &targets,
            &[
                ((0, LeaseOp::Renew), Reply::Held(5)),
                ((1, LeaseOp::Take), Reply::Refused),
            ],
            base + Duration::from_secs(1),
        );
        assert!(held.is_empty());
        assert_eq!(
            settled,
            Settled {
                changes: vec![Change::ChangedHands { partition: 0 }],
                waiting: true,
            }
        );
    }

    #[test]
    fn a_failed_call_changes_nothing_and_a_partition_released_meanwhile_stays_released() {
        let base = Instant::now();
        let streams: Vec<Arc<str>> = vec![Arc::from("a")];
        let held_a = Held {
            partition: 0,
            epoch: 1,
            valid_until: base,
            keep: true,
            handed_over: true,
        };
        let mut held = HashMap::from([(streams[0].clone(), held_a)]);
        let later = base + Duration::from_secs(1);
        let targets = HashSet::new();
        let settled = settle(
            &mut held,
            &streams,
            &targets,
            &[((0, LeaseOp::Renew), Reply::Failed)],
            later,
        );
        assert_eq!(settled, Settled::default());
        assert_eq!(held[&streams[0]].valid_until, base, "trust not extended");
        assert!(held[&streams[0]].keep);
        held.clear();
        let settled = settle(
            &mut held,
            &streams,
            &targets,
            &[((0, LeaseOp::Renew), Reply::Held(1))],
            later,
        );
        assert!(held.is_empty() && settled.changes.is_empty());
    }

    #[test]
    fn a_renewal_of_a_partition_no_longer_a_target_marks_it_to_give_up_once() {
        let base = Instant::now();
        let streams: Vec<Arc<str>> = vec![Arc::from("a")];
        let mut held = HashMap::from([(
            streams[0].clone(),
            Held {
                partition: 0,
                epoch: 2,
                valid_until: base,
                keep: true,
                handed_over: true,
            },
        )]);
        let later = base + Duration::from_secs(1);
        let renewed = [((0, LeaseOp::Renew), Reply::Held(2))];
        let first = settle(&mut held, &streams, &HashSet::new(), &renewed, later);
        assert_eq!(first.changes, vec![Change::GivingUp { partition: 0 }]);
        let h = held[&streams[0]];
        assert!(!h.keep && h.valid_until == later);
        let second = settle(&mut held, &streams, &HashSet::new(), &renewed, later);
        assert!(second.changes.is_empty(), "said once");
    }
}
