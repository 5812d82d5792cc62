//! The typed messages the actors exchange.

use actix::Message;
use uuid::Uuid;

use crate::publish::{Outcome, PublishError, StreamEvent};

/// "There may be work": sent by the listener on NOTIFY, by the poll timer, and by the retry
/// scheduler when a retry comes due.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Asks the claimer to stop claiming; answered once the batch in hand is committed or
/// rolled back (its row locks released), so another replica can take over at once.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Drain;

/// One topic's share of a batch, for that topic's dispatcher.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<(Uuid, Outcome)>, TopicOutage>")]
pub struct Publish {
    /// Chains in order: a key's run, or a single unkeyed event.
    pub chains: Vec<Vec<StreamEvent>>,
    /// The topic's own trimming, overriding `redis.maxlen`.
    pub maxlen: Option<u64>,
    /// The topic's partitions (its recorded count, read with the pause flag).
    pub partitions: u32,
}

/// A topic's publish that failed as a whole through nobody's fault: Redis, or on a cluster the
/// master of the topic's slot, unreachable or too slow. Its events wait `retry_in` (no attempt
/// counted); during that time the dispatcher fails the topic's publishes at once, without
/// asking Redis, so a dead node costs the other topics' cycles no time.
#[derive(Debug, Clone)]
pub struct TopicOutage {
    /// What went wrong.
    pub error: PublishError,
    /// How long the topic's events wait before their next try.
    pub retry_in: std::time::Duration,
}

/// An event that failed through its own fault, for the retry policy to decide on.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The event.
    pub id: Uuid,
    /// Failed attempts before this one.
    pub attempts: i32,
    /// The error, for a person.
    pub error: String,
}

/// Tells the retry scheduler that a retry was scheduled (committed) to come due after this,
/// and whom to wake then: the claimer names itself, so neither actor needs the other's
/// address to start.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct RetryDue {
    /// From now.
    pub after: std::time::Duration,
    /// The claimer to wake.
    pub wake: actix::Recipient<Wake>,
}
