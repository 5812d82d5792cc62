//! Creating a consumer group: `XGROUP CREATE <stream> <group> <start> MKSTREAM`, where a group
//! that exists already (`BUSYGROUP`) is left as it is. The relay creates declared groups, the
//! consumer library and `tail --group` the group they join.

use redis::aio::ConnectionLike;

/// Creates `group` on `stream` at `start` (`0` or `$`), and the stream if need be. `Ok(true)`:
/// created now; `Ok(false)`: it existed (and is left as it was).
pub async fn create<C: ConnectionLike>(
    conn: &mut C,
    stream: &str,
    group: &str,
    start: &str,
) -> redis::RedisResult<bool> {
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg(start)
        .arg("MKSTREAM")
        .query_async(conn)
        .await;
    match created {
        Ok(()) => Ok(true),
        Err(e) if e.code() == Some("BUSYGROUP") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `e` says the group (or its stream) is gone: someone deleted it, or Redis lost it.
pub fn is_nogroup(e: &redis::RedisError) -> bool {
    e.code() == Some("NOGROUP")
}
