//! The Redis side of repairing a stream that lost entries: which events it still holds, and
//! forgetting the dedup records of those to publish again (a flush of the stream alone
//! leaves them, and they would refuse the new entries).

use std::collections::HashSet;

use chrono::Utc;
use redis::streams::StreamRangeReply;
use uuid::Uuid;

use super::{keys, PublishError, Publisher};

/// Entries read per XRANGE page.
const PAGE: usize = 1000;

impl Publisher {
    /// The event ids of `stream`'s entries from `from_ms` on.
    pub async fn ids_from(
        &self,
        stream: &str,
        from_ms: u64,
    ) -> Result<HashSet<Uuid>, PublishError> {
        let mut ids = HashSet::new();
        let mut start = format!("{from_ms}-0");
        loop {
            let mut conn = self.conn.clone();
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(stream).arg(&start).arg("+").arg("COUNT").arg(PAGE);
            let page = cmd.query_async::<StreamRangeReply>(&mut conn);
            let page = match tokio::time::timeout(self.config.timeout, page).await {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => return Err(PublishError::Outage(e.to_string())),
                Err(_) => return Err(PublishError::Outage("XRANGE timed out".into())),
            };
            let Some(last) = page.ids.last() else {
                return Ok(ids);
            };
            start = format!("({}", last.id);
            for entry in &page.ids {
                let id = entry
                    .get::<String>(outbox_core::entry::field::ID)
                    .and_then(|text| Uuid::parse_str(&text).ok());
                ids.extend(id);
            }
            if page.ids.len() < PAGE {
                return Ok(ids);
            }
        }
    }

    /// Removes `ids` from `stream`'s dedup sets, so that their next XADD appends them.
    pub async fn forget(&self, stream: &str, ids: &[Uuid]) -> Result<(), PublishError> {
        let now = Utc::now().timestamp().max(0) as u64;
        let sets = keys::dedup_keys(stream, self.config.dedup_window, now);
        for chunk in ids.chunks(PAGE) {
            let mut pipe = redis::pipe();
            for set in &sets {
                pipe.cmd("SREM")
                    .arg(set)
                    .arg(
                        chunk
                            .iter()
                            .map(|id| id.as_bytes().to_vec())
                            .collect::<Vec<_>>(),
                    )
                    .ignore();
            }
            let mut conn = self.conn.clone();
            let sent = pipe.query_async::<()>(&mut conn);
            match tokio::time::timeout(self.config.timeout, sent).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PublishError::Outage(e.to_string())),
                Err(_) => return Err(PublishError::Outage("SREM timed out".into())),
            }
        }
        Ok(())
    }
}
