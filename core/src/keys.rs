//! Redis key names that producers, the relay and consumers in any language agree on: a
//! topic's stream `<prefix><topic>` (one partition) or streams `<prefix><topic>:<p>` (p in
//! 0..N), its dead stream `<prefix><topic>:dead`, and the hash `<prefix>partitions` (field:
//! topic, value: N) that tells consumers how many partitions a topic has.
//!
//! A consumer group's fleet on a partitioned topic keeps its bookkeeping beside the streams:
//! the sorted set of live members `<prefix><topic>:{<group>}:members`, and per partition
//! stream its lease `{<stream>}:owner:<group>` (the owning consumer's name, expiring) and its
//! fencing epoch `{<stream>}:epoch:<group>` (raised by each new owner), both in the stream's
//! cluster slot.

/// `<prefix><topic>`: the topic's stream.
pub fn stream_key(prefix: &str, topic: &str) -> String {
    format!("{prefix}{topic}")
}

/// The stream of partition `partition` of a topic with `partitions` partitions: the topic's one
/// stream when it has one, else `<prefix><topic>:<partition>`.
pub fn partition_key(prefix: &str, topic: &str, partition: u32, partitions: u32) -> String {
    match partitions {
        0 | 1 => stream_key(prefix, topic),
        _ => format!("{prefix}{topic}:{partition}"),
    }
}

/// Every stream of a topic with `partitions` partitions, in partition order.
pub fn partition_keys(prefix: &str, topic: &str, partitions: u32) -> Vec<String> {
    (0..partitions.max(1))
        .map(|p| partition_key(prefix, topic, p, partitions))
        .collect()
}

/// `<prefix>partitions`: the hash of each topic's partition count.
pub fn partitions_hash(prefix: &str) -> String {
    format!("{prefix}partitions")
}

/// `<prefix><topic>:dead`: where consumers move the entries they give up on (one per topic,
/// whatever its partitions).
pub fn dead_key(prefix: &str, topic: &str) -> String {
    dead_key_of(&stream_key(prefix, topic))
}

/// The dead stream of the stream `stream`.
pub fn dead_key_of(stream: &str) -> String {
    format!("{stream}:dead")
}

/// The `{...}` part that gives a key the cluster slot of `key`: `key` itself when it holds a
/// valid hash tag (Redis then hashes only the tag, which stays the first), else `{key}`.
pub fn slot_tag(key: &str) -> String {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return key.to_string();
            }
        }
    }
    format!("{{{key}}}")
}

/// The sorted set of a group's live consumers on a topic (member: the consumer's name; score:
/// when its membership expires, in Redis server milliseconds). The braces make the group's
/// name the hash tag.
pub fn fleet_members(prefix: &str, topic: &str, group: &str) -> String {
    format!("{prefix}{topic}:{{{group}}}:members")
}

/// The lease of a partition stream for a group: the owning consumer's name, expiring with
/// the lease. In the stream's slot, so one script can check the lease and move entries.
pub fn partition_owner(stream: &str, group: &str) -> String {
    format!("{}:owner:{group}", slot_tag(stream))
}

/// The fencing epoch of a partition stream for a group: incremented by each consumer that
/// takes its lease. In the stream's slot too.
pub fn partition_epoch(stream: &str, group: &str) -> String {
    format!("{}:epoch:{group}", slot_tag(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefix_and_topic() {
        assert_eq!(
            stream_key("outbox:", "order.created"),
            "outbox:order.created"
        );
        assert_eq!(
            dead_key("outbox:", "order.created"),
            "outbox:order.created:dead"
        );
        assert_eq!(dead_key_of("p:t"), "p:t:dead");
        assert_eq!(partition_key("o:", "t", 0, 1), "o:t");
        assert_eq!(partition_key("o:", "t", 3, 8), "o:t:3");
        assert_eq!(partition_keys("o:", "t", 2), ["o:t:0", "o:t:1"]);
        assert_eq!(partition_keys("o:", "t", 1), ["o:t"]);
        assert_eq!(partitions_hash("o:"), "o:partitions");
        assert_eq!(fleet_members("o:", "t", "g"), "o:t:{g}:members");
        assert_eq!(partition_owner("o:t:3", "g"), "{o:t:3}:owner:g");
        assert_eq!(partition_epoch("o:t:3", "g"), "{o:t:3}:epoch:g");
        assert_eq!(partition_owner("{o}:t:3", "g"), "{o}:t:3:owner:g");
    }
}
