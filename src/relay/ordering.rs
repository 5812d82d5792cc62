//! The per-key ordering rule as pure functions.
//!
//! The claim SQL locks *heads*: pending events with no earlier pending event of their
//! (topic, partition key). [`assemble`] turns the heads plus the locked events that follow
//! them into *chains*: an unkeyed event alone, or a key's head followed by its next events in
//! seq order, up to the first one not yet due. A chain is published in order and stops at
//! its first failure, so an event never reaches its stream ahead of an earlier one of its key.

use std::collections::HashMap;

/// What the rule needs to know of a claimed event.
pub trait Claimed {
    /// The topic.
    fn topic(&self) -> &str;
    /// The partition key.
    fn key(&self) -> Option<&str>;
    /// Insertion order.
    fn seq(&self) -> i64;
    /// `available_at` has passed.
    fn ready(&self) -> bool;
}

/// Builds chains from claimed heads and the followers locked behind them. Chains come out in
/// the order of their heads' seq; followers of keys without a head are dropped.
pub fn assemble<E: Claimed>(mut heads: Vec<E>, mut followers: Vec<E>) -> Vec<Vec<E>> {
    heads.sort_by_key(|e| e.seq());
    followers.sort_by_key(|e| e.seq());
    // Each follower's chain, looked up with keys borrowed from the rows before any row moves.
    let slots: Vec<Option<usize>> = {
        let by_key: HashMap<(&str, &str), usize> = heads
            .iter()
            .enumerate()
            .filter_map(|(n, head)| head.key().map(|key| ((head.topic(), key), n)))
            .collect();
        followers
            .iter()
            .map(|f| {
                f.key()
                    .and_then(|key| by_key.get(&(f.topic(), key)).copied())
            })
            .collect()
    };
    let mut chains: Vec<Vec<E>> = heads.into_iter().map(|head| vec![head]).collect();
    let mut closed = vec![false; chains.len()];
    for (follower, slot) in followers.into_iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let last_seq = chains[slot].last().map(|e| e.seq()).unwrap_or(i64::MAX);
        if closed[slot] || follower.seq() <= last_seq {
            continue;
        }
        if !follower.ready() {
            closed[slot] = true;
            continue;
        }
        chains[slot].push(follower);
    }
    chains
}

/// The claim rule itself, for the model in tests and for documentation: `event` may be
/// published when no pending event of the same topic and key has a smaller seq.
pub fn is_claimable<E: Claimed>(event: &E, pending: &[E]) -> bool {
    match event.key() {
        None => true,
        Some(key) => !pending
            .iter()
            .any(|p| p.topic() == event.topic() && p.key() == Some(key) && p.seq() < event.seq()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Ev {
        topic: String,
        key: Option<String>,
        seq: i64,
        ready: bool,
    }

    impl Claimed for Ev {
        fn topic(&self) -> &str {
            &self.topic
        }
        fn key(&self) -> Option<&str> {
            self.key.as_deref()
        }
        fn seq(&self) -> i64 {
            self.seq
        }
        fn ready(&self) -> bool {
            self.ready
        }
    }

    fn ev(topic: &str, key: Option<&str>, seq: i64) -> Ev {
        Ev {
            topic: topic.into(),
            key: key.map(Into::into),
            seq,
            ready: true,
        }
    }

    #[test]
    fn run_stops_at_first_event_not_due() {
        let heads = vec![ev("t", Some("k"), 1)];
        let mut late = ev("t", Some("k"), 3);
        late.ready = false;
        let followers = vec![ev("t", Some("k"), 2), late, ev("t", Some("k"), 4)];
        let chains = assemble(heads, followers);
        assert_eq!(chains.len(), 1);
        assert_eq!(
            chains[0].iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn same_key_on_other_topic_is_another_chain() {
        let heads = vec![
            ev("a", Some("k"), 1),
            ev("b", Some("k"), 2),
            ev("a", None, 3),
        ];
        let followers = vec![ev("b", Some("k"), 5), ev("a", Some("k"), 4)];
        let chains = assemble(heads, followers);
        let seqs: Vec<Vec<i64>> = chains
            .iter()
            .map(|c| c.iter().map(|e| e.seq).collect())
            .collect();
        assert_eq!(seqs, vec![vec![1, 4], vec![2, 5], vec![3]]);
    }

    // A model of the whole relay loop: events are inserted, a "relay" repeatedly claims
    // heads (the SQL rule), extends them into chains (assemble), and publishes each chain
    // until an injected failure; failed events go back to pending. Per-key order in the
    // resulting stream must equal insertion order, whatever fails.
    proptest! {
        #[test]
        fn stream_keeps_per_key_order_through_failures(
            keys in proptest::collection::vec(proptest::option::of(0u8..4), 1..60),
            failures in proptest::collection::vec(any::<bool>(), 0..400),
            batch in 1usize..8,
        ) {
            let all: Vec<Ev> = keys.iter().enumerate().map(|(i, k)| {
                ev(if i % 3 == 0 { "x" } else { "y" }, None, i as i64 + 1)
                    .with_key(k.map(|k| format!("k{k}")))
            }).collect();
            let mut pending = all.clone();
            let mut stream: Vec<Ev> = Vec::new();
            let mut fail = failures.into_iter();
            let mut rounds = 0;
            while !pending.is_empty() && rounds < 2_000 {
                rounds += 1;
                let mut heads: Vec<Ev> = pending.iter()
                    .filter(|e| is_claimable(*e, &pending))
                    .cloned().collect();
                heads.sort_by_key(|e| e.seq);
                heads.truncate(batch);
                let followers: Vec<Ev> = pending.iter()
                    .filter(|e| !heads.contains(e))
                    .cloned().collect();
                for chain in assemble(heads, followers) {
                    for e in chain {
                        if fail.next().unwrap_or(false) {
                            break;
                        }
                        pending.retain(|p| p.seq != e.seq);
                        stream.push(e);
                    }
                }
            }
            prop_assert!(pending.is_empty(), "every event is published eventually");
            for key in 0u8..4 {
                for topic in ["x", "y"] {
                    let k = format!("k{key}");
                    let published: Vec<i64> = stream.iter()
                        .filter(|e| e.topic == topic && e.key.as_deref() == Some(k.as_str()))
                        .map(|e| e.seq).collect();
                    let mut sorted = published.clone();
                    sorted.sort();
                    prop_assert_eq!(published, sorted);
                }
            }
        }
    }

    impl Ev {
        fn with_key(mut self, key: Option<String>) -> Self {
            self.key = key;
            self
        }
    }
}
