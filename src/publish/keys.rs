//! Redis key names: the topic's stream (`outbox_core::keys`) and its dedup sets.
//!
//! Dedup memory is bounded by time buckets: ids written during bucket `b` (of length
//! `dedup_window`) go into the set of bucket `b`, and each publish checks buckets `b - 1`,
//! `b` and `b + 1`. An id is therefore remembered for at least one full window, also by a
//! replica whose clock is off by less than a window. A set is not left to expire (Redis would
//! free it on its command thread, stalling every client): the first publish two buckets later
//! unlinks it, and so does each dispatcher's sweep for a topic gone quiet (see
//! [`retired_dedup_keys`]); the TTL is a backstop for when no relay runs. So at most two
//! buckets hold data. Each member is the id's 16 raw bytes (about 60 bytes of Redis memory per
//! event), so the memory is about `rate x 2 x window x 60 B` per topic.
//! Every dedup key carries the stream key's hash slot, so the script's keys share a slot on
//! Redis Cluster.

use std::time::Duration;

use outbox_core::keys::slot_tag;
pub use outbox_core::keys::{partition_key, partition_keys, partitions_hash, stream_key};

/// The dedup sets of a stream at `now_secs`: the current bucket (written), then the
/// previous and the next (read too, to tolerate clock skew between replicas).
pub fn dedup_keys(stream: &str, window: Duration, now_secs: u64) -> [String; 3] {
    let width = window.as_secs().max(1);
    let bucket = now_secs / width;
    let tag = slot_tag(stream);
    [
        format!("{tag}:dedup:{bucket}"),
        format!("{tag}:dedup:{}", bucket.saturating_sub(1)),
        format!("{tag}:dedup:{}", bucket + 1),
    ]
}

/// The set two buckets back at `now_secs`, which no publish reads any more (they read one
/// bucket either side of their own), or `None` before there is one. The script `UNLINK`s it:
/// Redis then frees it on its background thread. Left to its TTL, a large set is freed by
/// the expiry cycle on Redis's only command thread, which stalls every client of that Redis
/// meanwhile.
pub fn retired_dedup_key(stream: &str, window: Duration, now_secs: u64) -> Option<String> {
    retired_dedup_keys(stream, window, now_secs).next()
}

/// The sets two and three buckets back at `now_secs`, those that exist in time: what a sweep
/// unlinks (three back too, for a sweep that came late).
pub fn retired_dedup_keys(
    stream: &str,
    window: Duration,
    now_secs: u64,
) -> impl Iterator<Item = String> {
    let bucket = now_secs / window.as_secs().max(1);
    let tag = slot_tag(stream);
    (2..=3).filter_map(move |back| {
        let old = bucket.checked_sub(back)?;
        Some(format!("{tag}:dedup:{old}"))
    })
}

/// The TTL each write sets on its bucket's set: only a backstop. A set must stay readable
/// until the end of the next bucket (one window after its last write at the latest, plus a
/// minute for skew and slow batches); it lives a window longer so that a publish or a
/// dispatcher's sweep (every [`sweep_every`]) unlinks it first, and Redis frees it on its
/// background thread. Only with no relay running for a window does it expire, on Redis's
/// command thread.
pub fn dedup_ttl_secs(window: Duration) -> u64 {
    2 * window.as_secs().max(1) + 60
}

/// How often each dispatcher unlinks its topic's retired sets: well within the window a
/// retired set has before its TTL, so a topic whose traffic stopped is swept too.
pub fn sweep_every(window: Duration) -> Duration {
    (window / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_keys_share_the_streams_slot() {
        let [cur, prev, next] = dedup_keys("outbox:order.created", Duration::from_secs(900), 1800);
        assert_eq!(cur, "{outbox:order.created}:dedup:2");
        assert_eq!(prev, "{outbox:order.created}:dedup:1");
        assert_eq!(next, "{outbox:order.created}:dedup:3");
        let retired = retired_dedup_key("outbox:order.created", Duration::from_secs(900), 1800);
        assert_eq!(retired.as_deref(), Some("{outbox:order.created}:dedup:0"));
        let swept: Vec<String> =
            retired_dedup_keys("outbox:order.created", Duration::from_secs(900), 2700).collect();
        assert_eq!(
            swept,
            [
                "{outbox:order.created}:dedup:1",
                "{outbox:order.created}:dedup:0"
            ]
        );
        assert_eq!(
            sweep_every(Duration::from_secs(900)),
            Duration::from_secs(30)
        );
        assert_eq!(sweep_every(Duration::from_secs(2)), Duration::from_secs(1));
        for now in [0, 899, 900, 1799] {
            let none = retired_dedup_key("outbox:order.created", Duration::from_secs(900), now);
            assert_eq!(none, None, "no bucket two back at {now}");
        }
        let [cur, ..] = dedup_keys("outbox:{tenant}x", Duration::from_secs(900), 0);
        assert_eq!(cur, "outbox:{tenant}x:dedup:0");
        let [cur, ..] = dedup_keys("outbox:{}x", Duration::from_secs(900), 0);
        assert_eq!(cur, "{outbox:{}x}:dedup:0");
    }
}
