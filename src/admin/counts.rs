//! Per-topic counts for the admin's overview, stats and topics, without scanning the table on
//! every page view.
//!
//! Pending, dead and discarded counts and the topics' settings are read fresh on each call
//! (from the unsettled rows' partial indexes: proportional to the backlog, not to the rows
//! kept). Published counts need a pass over every published row the retention keeps, and
//! the overview refreshes every 5 s in every open browser: they are cached per replica and
//! recounted at most every `max(1 s, 20 x the last count's duration)`, so the admin never
//! spends more than about 5% of one Postgres core on them, however many people watch.
//! One count runs at a time; callers meanwhile wait for its result.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use diesel_async::AsyncPgConnection;
use tokio::sync::Mutex;

use crate::db::outbox::stats::{self, TopicCounts};
use crate::db::DbError;

/// The shortest life of a published count.
const MIN_AGE: Duration = Duration::from_secs(1);
/// A count lives this many times as long as it took to make.
const AGE_PER_COST: u32 = 20;

struct Counted {
    at: Instant,
    took: Duration,
    published: HashMap<String, i64>,
}

/// The cached published counts of one replica's admin.
#[derive(Default)]
pub struct PublishedCache {
    last: Mutex<Option<Counted>>,
}

impl PublishedCache {
    /// Published rows per topic, recounted when the last count is too old.
    async fn get(&self, conn: &mut AsyncPgConnection) -> Result<HashMap<String, i64>, DbError> {
        let mut last = self.last.lock().await;
        if let Some(c) = last.as_ref() {
            if c.at.elapsed() < MIN_AGE.max(c.took * AGE_PER_COST) {
                return Ok(c.published.clone());
            }
        }
        let started = Instant::now();
        let published: HashMap<String, i64> =
            stats::published_counts(conn).await?.into_iter().collect();
        *last = Some(Counted {
            at: Instant::now(),
            took: started.elapsed(),
            published: published.clone(),
        });
        Ok(published)
    }
}

/// Every topic with rows or settings (`only`: just that one), with its counts.
pub async fn topic_counts(
    cache: &PublishedCache,
    conn: &mut AsyncPgConnection,
    only: Option<&str>,
) -> Result<Vec<TopicCounts>, DbError> {
    let mut rows = stats::unsettled_counts(conn, only).await?;
    let published = cache.get(conn).await?;
    for row in &mut rows {
        row.published = published.get(&row.topic).copied().unwrap_or(0);
    }
    // Topics with published rows only (nothing pending, dead or set).
    for (topic, count) in &published {
        let wanted = only.is_none_or(|o| o == topic);
        if wanted && !rows.iter().any(|r| &r.topic == topic) {
            rows.push(TopicCounts {
                topic: topic.clone(),
                pending: 0,
                published: *count,
                dead: 0,
                discarded: 0,
                paused: false,
                maxlen: None,
            });
        }
    }
    rows.sort_by(|a, b| a.topic.cmp(&b.topic));
    Ok(rows)
}
