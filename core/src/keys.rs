//! Redis key names that producers, the relay and consumers in any language agree on: a
//! topic's stream `<prefix><topic>` and its dead stream `<prefix><topic>:dead`.

/// `<prefix><topic>`: the topic's stream.
pub fn stream_key(prefix: &str, topic: &str) -> String {
    format!("{prefix}{topic}")
}

/// `<prefix><topic>:dead`: where consumers move the entries they give up on.
pub fn dead_key(prefix: &str, topic: &str) -> String {
    dead_key_of(&stream_key(prefix, topic))
}

/// The dead stream of the stream `stream`.
pub fn dead_key_of(stream: &str) -> String {
    format!("{stream}:dead")
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
    }
}
