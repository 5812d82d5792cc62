//! The topic rule: 1 to 255 characters, no whitespace or control characters. The `outbox`
//! table's CHECK constraint says the same in SQL; the relay's API, its producer functions and
//! the consumer library check it here before a round trip.

/// The rule in words, for error messages.
pub const RULE: &str = "1 to 255 characters, no whitespace or control characters";

/// A topic that breaks [`RULE`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid topic {0:?}: {RULE}")]
pub struct InvalidTopic(pub String);

/// Whether `topic` follows the rule.
pub fn is_valid(topic: &str) -> bool {
    let len = topic.chars().count();
    (1..=255).contains(&len) && !topic.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `Ok` for a topic that follows the rule, else the error naming it.
pub fn check(topic: &str) -> Result<(), InvalidTopic> {
    match is_valid(topic) {
        true => Ok(()),
        false => Err(InvalidTopic(topic.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_counts_characters_and_refuses_blanks() {
        assert!(is_valid("order.created"));
        assert!(is_valid(&"é".repeat(255)));
        assert!(!is_valid(&"é".repeat(256)));
        assert!(!is_valid(""));
        assert!(!is_valid("a b"));
        assert!(!is_valid("a\u{0}"));
        assert!(!is_valid("a\u{a0}b"), "a no-break space is whitespace too");
        assert_eq!(
            check("a\tb").map_err(|e| e.to_string()),
            Err(format!("invalid topic \"a\\tb\": {RULE}"))
        );
    }
}
