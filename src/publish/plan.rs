//! The plan of one stream's publish, pure: which events go in which script call, and what
//! becomes of each. Calls hold at most about [`CALL_BYTES`](super::CALL_BYTES) of entries (the
//! first event of a call always goes, whatever its size), so a batch of big events never turns
//! into one call too large to finish within the timeout. A chain that failed, refused before
//! any call (over `redis.max_payload_bytes`, or not writable as a CloudEvent) or by a call's
//! reply, has its later events skipped, in the same call and in the next ones: a key never gets
//! a later event ahead of an earlier one.
//!
//! `Publisher::publish_to` runs it: it asks for the next call, sends it, and hands the replies
//! back. No Redis here, so every way a stream's publish can end is unit-tested on made-up
//! replies.

use uuid::Uuid;

use super::{envelope, Outcome, StreamEvent};

/// One script call's share of a stream's events.
pub(super) struct Call<'a> {
    /// The events with the index of their chain, in order.
    pub(super) sent: Vec<(&'a StreamEvent, usize)>,
    /// On a CloudEvents topic, each sent event's `cloudevent` field, aligned with `sent`.
    pub(super) bodies: Option<Vec<String>>,
    /// Where each sent event is in the plan, aligned with `sent`.
    at: Vec<usize>,
}

/// The events of one stream's publish (chains flattened in order), what has become of each so
/// far, and the next event no call has looked at.
pub(super) struct CallPlan<'a> {
    /// Each event with the index of its chain (unkeyed events are chains of one, so they never
    /// share a failure).
    items: Vec<(&'a StreamEvent, usize)>,
    outcomes: Vec<Option<Outcome>>,
    /// Per chain: one of its events failed.
    failed: Vec<bool>,
    next: usize,
    /// `redis.max_payload_bytes`: a bigger entry fails.
    max_entry: usize,
    /// A call takes events until their entries reach this many bytes.
    call_bytes: usize,
}

impl<'a> CallPlan<'a> {
    /// The plan of publishing `chains` (in order) to one stream.
    pub(super) fn new(chains: &'a [Vec<StreamEvent>], max_entry: usize, call_bytes: usize) -> Self {
        let mut items: Vec<(&StreamEvent, usize)> = Vec::new();
        for (n, chain) in chains.iter().enumerate() {
            items.extend(chain.iter().map(|event| (event, n)));
        }
        CallPlan {
            outcomes: vec![None; items.len()],
            failed: vec![false; chains.len()],
            items,
            next: 0,
            max_entry,
            call_bytes,
        }
    }

    /// The next call, or `None` when every event has an outcome. `body` gives an event's
    /// `cloudevent` field on a CloudEvents topic (`Ok(None)` on the relay's own envelope), or
    /// why it cannot be written, which fails the event.
    pub(super) fn next_call(
        &mut self,
        mut body: impl FnMut(&StreamEvent) -> Result<Option<String>, String>,
    ) -> Option<Call<'a>> {
        let mut call = Call {
            sent: Vec::new(),
            bodies: None,
            at: Vec::new(),
        };
        let mut bytes = 0;
        while self.next < self.items.len() && (call.at.is_empty() || bytes < self.call_bytes) {
            let i = self.next;
            self.next += 1;
            let (event, chain) = self.items[i];
            if self.failed[chain] {
                self.outcomes[i] = Some(Outcome::Skipped);
                continue;
            }
            let body = match body(event) {
                Ok(body) => body,
                Err(why) => {
                    self.fail(i, why);
                    continue;
                }
            };
            let size = body
                .as_deref()
                .map_or_else(|| event.entry_size(), envelope::entry_size);
            if size > self.max_entry {
                let why = format!(
                    "entry is {size} bytes, over redis.max_payload_bytes ({})",
                    self.max_entry
                );
                self.fail(i, why);
                continue;
            }
            bytes += size;
            call.sent.push((event, chain));
            call.at.push(i);
            if let Some(body) = body {
                call.bodies.get_or_insert_with(Vec::new).push(body);
            }
        }
        (!call.at.is_empty()).then_some(call)
    }

    /// The event at `i` failed before any call: its chain's later events are skipped.
    fn fail(&mut self, i: usize, why: String) {
        self.outcomes[i] = Some(Outcome::Failed(why));
        self.failed[self.items[i].1] = true;
    }

    /// What the script answered for `call`'s events, in order; an event it did not answer for
    /// stays skipped.
    pub(super) fn record(&mut self, call: &Call<'_>, replies: Vec<Outcome>) {
        for (&i, outcome) in call.at.iter().zip(replies) {
            if matches!(outcome, Outcome::Failed(_)) {
                self.failed[self.items[i].1] = true;
            }
            self.outcomes[i] = Some(outcome);
        }
    }

    /// Each event's id and outcome, in input order.
    pub(super) fn outcomes(self) -> Vec<(Uuid, Outcome)> {
        self.items
            .iter()
            .zip(self.outcomes)
            .map(|((event, _), outcome)| (event.id, outcome.unwrap_or(Outcome::Skipped)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    /// An event whose entry is `size` bytes (at least the fixed fields' 128).
    fn event(key: Option<&str>, size: usize) -> StreamEvent {
        let mut event = StreamEvent {
            id: Uuid::new_v4(),
            topic: "t".into(),
            key: key.map(str::to_string),
            payload: String::new(),
            headers: "{}".into(),
            created_at: Utc::now(),
        };
        let fixed = event.entry_size();
        event.payload = "x".repeat(size.saturating_sub(fixed));
        event
    }

    fn own_envelope(_: &StreamEvent) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// The positions in the plan of a call's events.
    fn positions(call: &Call<'_>) -> Vec<usize> {
        call.at.clone()
    }

    #[test]
    fn an_oversized_event_fails_alone_and_holds_back_its_key_only() {
        // Chain 0: a key's run of three, its second too big; chains 1 and 2: unkeyed.
        let chains = vec![
            vec![
                event(Some("k"), 200),
                event(Some("k"), 5_000),
                event(Some("k"), 200),
            ],
            vec![event(None, 200)],
            vec![event(None, 200)],
        ];
        let mut plan = CallPlan::new(&chains, 1_000, 1 << 20);
        let call = plan.next_call(own_envelope).expect("a call");
        assert_eq!(positions(&call), [0, 3, 4]);
        assert!(call.bodies.is_none());
        plan.record(
            &call,
            vec![Outcome::Published, Outcome::Duplicate, Outcome::Published],
        );
        assert!(plan.next_call(own_envelope).is_none());
        let outcomes: Vec<Outcome> = plan.outcomes().into_iter().map(|(_, o)| o).collect();
        assert_eq!(outcomes[0], Outcome::Published);
        assert!(matches!(&outcomes[1], Outcome::Failed(why) if why.contains("5000 bytes")));
        assert_eq!(outcomes[2], Outcome::Skipped);
        assert_eq!(outcomes[3], Outcome::Duplicate);
        assert_eq!(outcomes[4], Outcome::Published);
    }

    #[test]
    fn a_failure_in_one_call_skips_the_rest_of_its_chain_in_the_next() {
        // Calls of about 500 bytes: two events of 300 fill one.
        let chains = vec![
            vec![
                event(Some("a"), 300),
                event(Some("a"), 300),
                event(Some("a"), 300),
            ],
            vec![event(Some("b"), 300), event(Some("b"), 300)],
        ];
        let ids: Vec<Uuid> = chains.iter().flatten().map(|e| e.id).collect();
        let mut plan = CallPlan::new(&chains, 10_000, 500);
        let first = plan.next_call(own_envelope).expect("first call");
        assert_eq!(positions(&first), [0, 1]);
        // The key's second event fails (WRONGTYPE, say): its third must not go.
        plan.record(
            &first,
            vec![Outcome::Published, Outcome::Failed("WRONGTYPE".into())],
        );
        let second = plan.next_call(own_envelope).expect("second call");
        assert_eq!(positions(&second), [3, 4]);
        plan.record(&second, vec![Outcome::Published, Outcome::Published]);
        assert!(plan.next_call(own_envelope).is_none());
        let outcomes = plan.outcomes();
        assert_eq!(outcomes.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids);
        let outcomes: Vec<Outcome> = outcomes.into_iter().map(|(_, o)| o).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Published,
                Outcome::Failed("WRONGTYPE".into()),
                Outcome::Skipped,
                Outcome::Published,
                Outcome::Published,
            ]
        );
    }

    #[test]
    fn a_call_takes_its_first_event_whatever_its_size_and_stops_past_the_limit() {
        let chains = vec![
            vec![event(None, 900)],
            vec![event(None, 200)],
            vec![event(None, 200)],
            vec![event(None, 200)],
        ];
        let mut plan = CallPlan::new(&chains, 10_000, 300);
        let mut calls = Vec::new();
        while let Some(call) = plan.next_call(own_envelope) {
            calls.push(positions(&call));
            let replies = vec![Outcome::Published; call.sent.len()];
            plan.record(&call, replies);
        }
        assert_eq!(calls, [vec![0], vec![1, 2], vec![3]]);
        assert!(plan
            .outcomes()
            .iter()
            .all(|(_, o)| *o == Outcome::Published));
    }

    #[test]
    fn an_event_not_writable_as_a_cloudevent_fails_and_the_bodies_stay_aligned() {
        let chains = vec![
            vec![event(Some("k"), 200), event(Some("k"), 200)],
            vec![event(None, 200)],
        ];
        let bad = chains[0][0].id;
        let mut plan = CallPlan::new(&chains, 10_000, 1 << 20);
        let call = plan
            .next_call(|e| {
                if e.id == bad {
                    Err("cannot be written as a CloudEvent: no".into())
                } else {
                    Ok(Some(format!("body of {}", e.id)))
                }
            })
            .expect("a call");
        assert_eq!(positions(&call), [2]);
        assert_eq!(
            call.bodies.as_deref(),
            Some([format!("body of {}", chains[1][0].id)].as_slice())
        );
        plan.record(&call, vec![Outcome::Published]);
        let outcomes: Vec<Outcome> = plan.outcomes().into_iter().map(|(_, o)| o).collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Failed("cannot be written as a CloudEvent: no".into()),
                Outcome::Skipped,
                Outcome::Published,
            ]
        );
    }

    #[test]
    fn an_event_the_script_did_not_answer_for_is_skipped() {
        let chains = vec![vec![event(None, 200)], vec![event(None, 200)]];
        let mut plan = CallPlan::new(&chains, 10_000, 1 << 20);
        let call = plan.next_call(own_envelope).expect("a call");
        plan.record(&call, vec![Outcome::Published]);
        assert!(plan.next_call(own_envelope).is_none());
        let outcomes: Vec<Outcome> = plan.outcomes().into_iter().map(|(_, o)| o).collect();
        assert_eq!(outcomes, [Outcome::Published, Outcome::Skipped]);
    }

    #[test]
    fn nothing_to_send_when_every_event_fails_before_a_call() {
        let chains = vec![vec![event(Some("k"), 5_000), event(Some("k"), 200)]];
        let mut plan = CallPlan::new(&chains, 1_000, 1 << 20);
        assert!(plan.next_call(own_envelope).is_none());
        let outcomes: Vec<Outcome> = plan.outcomes().into_iter().map(|(_, o)| o).collect();
        assert!(matches!(outcomes[0], Outcome::Failed(_)));
        assert_eq!(outcomes[1], Outcome::Skipped);
    }
}
