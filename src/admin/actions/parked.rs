//! Releasing a consumer group's parked key (contract section 13): discard (the dead entry stays
//! dead, the held entries take effect) or redrive (the dead entry handled again first). The
//! group's consumers do the handling; the action changes the key's state in Redis and records
//! an audit row.

use outbox_core::parked::Release;

use super::{check_topic, ActionError, Actions};
use crate::db::{audit, DbError};
use crate::publish::parked::ReleaseError;
use crate::publish::Publisher;

impl Actions<'_> {
    /// Releases `key` of `group` on `topic` as `who`; returns how many entries will take
    /// effect.
    pub async fn release_parked(
        &self,
        publisher: &Publisher,
        who: &str,
        topic: &str,
        group: &str,
        key: &str,
        how: Release,
    ) -> Result<u64, ActionError> {
        check_topic(topic)?;
        let released = publisher
            .release_parked(topic, group, key, how)
            .await
            .map_err(|e| match e {
                ReleaseError::NotParked(key) => ActionError::NotParked(key),
                ReleaseError::DeadEntryGone(_) => ActionError::DeadEntryGone(e.to_string()),
                ReleaseError::Redis(e) => ActionError::Redis(e.to_string()),
            })?;
        let action = match how {
            Release::Discard => "discard_parked",
            Release::Redrive => "redrive_parked",
        };
        let detail = serde_json::json!({ "group": group, "key": key, "released": released });
        self.db
            .unit(async |c| {
                audit::record(c, who, action, topic, &detail).await?;
                Ok::<_, DbError>(())
            })
            .await?;
        Ok(released)
    }
}
