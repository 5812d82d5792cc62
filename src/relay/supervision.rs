//! What a panic does. actix's `Supervisor` restarts an actor that stops, not one that panics:
//! a panic ends the actor's task and closes its mailbox while the process looks alive. So:
//! - an actor's work runs under [`catching`]: a panic there is logged and counted, and the
//!   actor stops itself, which its supervisor turns into a restart with fresh state;
//! - a panic anywhere else in an actor kills it for good: [`Watched`] notices the closed
//!   mailbox and the app ends the process with a non-zero status, so the orchestrator restarts
//!   the replica. Every guarantee rests on Postgres transactions, so an abrupt exit loses
//!   nothing: what the replica held is rolled back and claimed again.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::{Actor, Addr};
use futures::FutureExt;

use crate::telemetry::ActorName;

/// The work panicked; the message is in the log.
#[derive(Debug)]
pub struct Panicked;

/// Runs `work`, turning a panic into [`Panicked`] (logged and counted under `actor`).
pub async fn catching<F: Future>(actor: ActorName, work: F) -> Result<F::Output, Panicked> {
    AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .map_err(|payload| {
            crate::telemetry::actor_panicked(actor, &outbox_core::panic::message(payload.as_ref()));
            Panicked
        })
}

/// Whether an actor's mailbox is still open.
type Alive = Box<dyn Fn() -> bool + Send>;

/// The relay's long-lived actors, by name, for the watchdog: those started with the relay and
/// those started later (a topic's dispatcher, when the topic first shows up). Clones share
/// the list.
#[derive(Default, Clone)]
pub struct Watched {
    actors: Arc<Mutex<Vec<(ActorName, Alive)>>>,
}

impl Watched {
    /// Watches `addr` under `name`.
    pub fn add<A: Actor>(&self, name: ActorName, addr: &Addr<A>) {
        let addr = addr.clone();
        self.actors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, Box::new(move || addr.connected())));
    }

    /// The first actor whose mailbox is closed.
    pub fn lost(&self) -> Option<ActorName> {
        self.actors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(_, alive)| !alive())
            .map(|(name, _)| *name)
    }

    /// Resolves with the name of the first actor found gone, checking every `every`.
    pub async fn first_lost(&self, every: Duration) -> ActorName {
        loop {
            if let Some(name) = self.lost() {
                return name;
            }
            tokio::time::sleep(every).await;
        }
    }
}
