//! Setting up the streams a consumer reads: each topic's stream, or its partitions' as the
//! `<prefix>partitions` hash says, and the group on each.

use std::sync::Arc;

use redis::RedisResult;

use crate::config::ConsumerConfig;
use outbox_core::{groups, keys, RedisConn};

/// `XGROUP CREATE key group 0 MKSTREAM`; a group that exists already is left as it is.
pub(crate) async fn ensure_group(conn: &mut RedisConn, key: &str, group: &str) -> RedisResult<()> {
    groups::create(conn, key, group, "0").await.map(|_| ())
}

/// The streams of each configured topic, in order: `<prefix><topic>`, or for a topic with
/// N > 1 partitions in the `<prefix>partitions` hash its N streams.
pub(crate) async fn resolve_partitions(
    conn: &mut RedisConn,
    config: &ConsumerConfig,
) -> RedisResult<Vec<(String, Vec<Arc<str>>)>> {
    let prefix = &config.stream_prefix;
    let mut topics = Vec::new();
    for topic in &config.topics {
        let mut streams = Vec::new();
        let counts: Option<u32> = redis::cmd("HGET")
            .arg(keys::partitions_hash(prefix))
            .arg(topic)
            .query_async(conn)
            .await?;
        match counts.unwrap_or(1) {
            0 | 1 => streams.push(Arc::from(keys::stream_key(prefix, topic))),
            n => streams.extend(
                keys::partition_keys(prefix, topic, n)
                    .into_iter()
                    .map(Arc::from),
            ),
        }
        topics.push((topic.clone(), streams));
    }
    Ok(topics)
}
