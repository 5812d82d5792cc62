//! Keeps the streams' marks (the last entry id appended to each) in `outbox_stream_marks`, so
//! a relay that restarts still notices a stream that lost entries while it was away, and so
//! does every replica for entries another one appended: once a second it saves the marks that
//! rose (one small upsert per stream, not a write per event) and reads back every stored mark
//! (a higher one wins). It also lifts a repaired topic's barrier once its lost
//! events are all published again (see `relay::repair`).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::periodic::Job;
use crate::db::{stream_marks, topics, Db, DbError};
use crate::publish::Publisher;
use crate::telemetry::ActorName;

/// How often risen marks are saved.
const EVERY: Duration = Duration::from_secs(1);

/// The marks' keeper.
#[derive(Clone)]
pub struct MarksKeeper {
    /// Where they are kept.
    pub db: Db,
    /// Whose marks.
    pub publisher: Publisher,
}

impl Job for MarksKeeper {
    const ACTOR: ActorName = ActorName::Marks;
    type Error = DbError;

    fn interval(&self) -> Duration {
        EVERY
    }

    fn run_once(&self) -> BoxFuture<'static, Result<(), DbError>> {
        let me = self.clone();
        async move {
            let marks = me.publisher.marks();
            let released = me.db.unit(async |c| topics::release_repaired(c).await).await?;
            for topic in released {
                tracing::info!(%topic, "lost events published again; the topic's newer events flow");
            }
            let unsaved = marks.take_unsaved();
            let saved = me
                .db
                .unit(async |c| stream_marks::raise(c, &unsaved).await)
                .await;
            if let Err(e) = saved {
                marks.unsaved_again(unsaved);
                return Err(e);
            }
            let stored = me.db.unit(async |c| stream_marks::load(c).await).await?;
            marks.load(stored);
            Ok(())
        }
        .boxed()
    }
}
