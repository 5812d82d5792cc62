//! The listener actor: LISTENs on a dedicated connection (never a pooled one) and wakes the
//! claimer on each notification. When the connection drops it stops itself; its supervisor
//! restarts it, it reconnects, LISTENs again and wakes the claimer once to catch up on
//! anything committed while it was away.

use actix::{
    Actor, ActorContext, ActorFutureExt, AsyncContext, Context, Recipient, Supervised, WrapFuture,
};
use diesel_async::SimpleAsyncConnection;
use futures::StreamExt;

use super::messages::Wake;
use crate::db::pool::{establish, ConnectLog, Drivers};
use crate::db::DbError;
use crate::db::Session;
use crate::telemetry::ActorName;

/// The channel the outbox trigger notifies.
pub const CHANNEL: &str = "outbox_events";

/// Forwards NOTIFY to the claimer.
pub struct Listener {
    url: String,
    session: Session,
    log: ConnectLog,
    claimer: Recipient<Wake>,
    failures: u32,
}

impl Listener {
    /// A listener for `url` that wakes `claimer`.
    pub fn new(url: String, session: Session, log: ConnectLog, claimer: Recipient<Wake>) -> Self {
        Listener {
            url,
            session,
            log,
            claimer,
            failures: 0,
        }
    }
}

async fn listen(
    url: String,
    session: Session,
    log: ConnectLog,
    claimer: Recipient<Wake>,
) -> DbError {
    let mut conn = match establish(&url, session, Drivers::Caller, &log).await {
        Ok(conn) => conn,
        Err(e) => return DbError::Connect(e),
    };
    if let Err(e) = conn.batch_execute(&format!("LISTEN {CHANNEL}")).await {
        return DbError::Query(e);
    }
    tracing::debug!("listening for outbox notifications");
    claimer.do_send(Wake);
    let notifications = conn.notifications_stream();
    let mut notifications = std::pin::pin!(notifications);
    while let Some(item) = notifications.next().await {
        match item {
            Ok(_) => claimer.do_send(Wake),
            Err(e) => return DbError::Query(e),
        }
    }
    DbError::Pool("notification connection closed".into())
}

impl Actor for Listener {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let run = listen(
            self.url.clone(),
            self.session,
            self.log.clone(),
            self.claimer.clone(),
        );
        let run = super::supervision::catching(ActorName::Listener, run);
        ctx.spawn(run.into_actor(self).map(|result, act, ctx| {
            let Ok(error) = result else {
                ctx.stop();
                return;
            };
            act.failures = act.failures.saturating_add(1);
            match &error {
                // `pool::establish` has logged why, once a minute: no line per retry.
                DbError::Connect(_) => {
                    crate::telemetry::job_failed_quietly(ActorName::Listener, &error)
                }
                _ => crate::telemetry::job_failed(ActorName::Listener, &error),
            }
            let pause = outbox_core::backoff::outage_pause(act.failures, 0.5);
            // Stopping hands us to the supervisor, which restarts us after the pause.
            ctx.run_later(pause, |_, ctx| ctx.stop());
        }));
    }
}

impl Supervised for Listener {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::info!("listener reconnecting");
    }
}
