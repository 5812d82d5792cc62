//! Redis key names that producers, the relay and consumers in any language agree on: a
//! topic's stream `<prefix><topic>` (one partition) or streams `<prefix><topic>:<p>` (p in
//! 0..N), its dead stream `<prefix><topic>:dead`, and the hash `<prefix>partitions` (field:
//! topic, value: N) that tells consumers how many partitions a topic has.
//!
//! A consumer group's fleet on a partitioned topic keeps its bookkeeping beside the streams,
//! all in one hash slot (the group's name is the hash tag): the sorted set of live members
//! `<prefix><topic>:{<group>}:members`, each partition's lease `...:owner:<p>` (the owning
//! consumer's name, expiring) and its fencing epoch `...:epoch:<p>` (raised by each new owner).

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

/// `<prefix><topic>:{<group>}`: the start of every key of a group's fleet on a topic. The
/// braces make the group's name the cluster hash tag, so one script can touch them all.
pub fn fleet_base(prefix: &str, topic: &str, group: &str) -> String {
    format!("{prefix}{topic}:{{{group}}}")
}

/// The sorted set of a group's live consumers on a topic (score: when the membership expires,
/// in Redis server milliseconds).
pub fn fleet_members(prefix: &str, topic: &str, group: &str) -> String {
    format!("{}:members", fleet_base(prefix, topic, group))
}

/// The lease of one partition: the owning consumer's name, with the lease's expiry as TTL.
pub fn partition_owner(prefix: &str, topic: &str, group: &str, partition: u32) -> String {
    format!("{}:owner:{partition}", fleet_base(prefix, topic, group))
}

/// The fencing epoch of one partition: incremented by each consumer that takes its lease.
pub fn partition_epoch(prefix: &str, topic: &str, group: &str, partition: u32) -> String {
    format!("{}:epoch:{partition}", fleet_base(prefix, topic, group))
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
        assert_eq!(partition_owner("o:", "t", "g", 3), "o:t:{g}:owner:3");
        assert_eq!(partition_epoch("o:", "t", "g", 3), "o:t:{g}:epoch:3");
    }
}
