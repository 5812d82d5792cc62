//! The topic rule: 1 to 255 characters, no whitespace or control characters. The `outbox`
//! table's CHECK constraint says the same in SQL; the relay's API, its producer functions and
//! the consumer library check it here before a round trip.

/// The rule in words, for error messages.
pub const RULE: &str = "1 to 255 characters, no whitespace or control characters";

/// The rule as a JSON Schema (ECMA-262 and Python `re`) pattern, for the API's OpenAPI
/// document; lengths are `minLength`/`maxLength` there, which count characters as this does.
pub const PATTERN: &str =
    r"^[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$";

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

    /// The characters [`PATTERN`] refuses, as ranges: whitespace and control characters.
    const REFUSED: [(u32, u32); 8] = [
        (0x00, 0x20),
        (0x7f, 0xa0),
        (0x1680, 0x1680),
        (0x2000, 0x200a),
        (0x2028, 0x2029),
        (0x202f, 0x202f),
        (0x205f, 0x205f),
        (0x3000, 0x3000),
    ];

    #[test]
    fn the_pattern_refuses_exactly_the_characters_the_rule_refuses() {
        for c in (0..0x11_0000).filter_map(char::from_u32) {
            let refused = REFUSED
                .iter()
                .any(|(lo, hi)| (*lo..=*hi).contains(&(c as u32)));
            assert_eq!(
                refused,
                c.is_whitespace() || c.is_control(),
                "{:#x}",
                c as u32
            );
        }
        let escape = |n: u32| match n {
            0..=0xff => format!("\\x{n:02x}"),
            _ => format!("\\u{n:04x}"),
        };
        let class: String = REFUSED
            .iter()
            .map(|&(lo, hi)| match lo == hi {
                true => escape(lo),
                false if hi == lo + 1 => format!("{}{}", escape(lo), escape(hi)),
                false => format!("{}-{}", escape(lo), escape(hi)),
            })
            .collect();
        assert_eq!(PATTERN, format!("^[^{class}]+$"));
    }

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
