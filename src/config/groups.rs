//! Consumer groups as configuration: TOML `[[groups]]` tables, or `OUTBOX__GROUPS` as
//! comma-separated `topic:name` pairs. The relay creates each declared group before it first
//! publishes to the group's topic, and `redis.trim_acked` trims only what every declared group
//! of a stream has acknowledged.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

use super::pairs::{self, Pair};
use super::rule::Rule;
use super::Settings;

/// Where a new group starts reading.
pub const START_ALL: &str = "0";
/// A group that sees only entries added after its creation.
pub const START_NEW: &str = "$";

/// One declared consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// The topic whose stream the group reads.
    pub topic: String,
    /// The group's name.
    pub name: String,
    /// `"0"` (every entry still in the stream) or `"$"` (entries added after the group was
    /// created).
    #[serde(default = "start_all")]
    pub start: String,
}

fn start_all() -> String {
    START_ALL.to_string()
}

impl GroupSpec {
    /// A group of `topic` called `name` that sees every entry.
    pub fn new(topic: &str, name: &str) -> Self {
        GroupSpec {
            topic: topic.to_string(),
            name: name.to_string(),
            start: start_all(),
        }
    }
}

impl Pair for GroupSpec {
    const EXAMPLE: &'static str = "OUTBOX__GROUPS=orders:billing,orders:shipping";
    const TABLE: &'static str = "{topic, name, start}";

    fn from_pair(topic: &str, name: &str) -> Result<Self, String> {
        Ok(GroupSpec::new(topic, name))
    }
}

/// Parses `topic:name,topic:name` (each pair split at its last colon, so a topic may hold
/// colons; blanks around items are ignored).
pub fn parse_pairs(text: &str) -> Result<Vec<GroupSpec>, String> {
    pairs::parse(text)
}

/// What is wrong with the declared groups, if anything.
pub fn check(groups: &[GroupSpec]) -> Result<(), String> {
    for (n, g) in groups.iter().enumerate() {
        if !outbox_core::topic::is_valid(&g.topic) {
            return Err(format!(
                "group `{}`: the topic `{}` breaks the topic rule ({})",
                g.name,
                g.topic,
                outbox_core::topic::RULE
            ));
        }
        if g.name.is_empty() || g.name.chars().any(char::is_whitespace) {
            return Err(format!(
                "a group of topic `{}` needs a non-empty name without blanks, not `{}`",
                g.topic, g.name
            ));
        }
        if g.start != START_ALL && g.start != START_NEW {
            return Err(format!(
                "group `{}` of `{}`: start must be \"0\" (every entry) or \"$\" (new entries only), not `{}`",
                g.name, g.topic, g.start
            ));
        }
        if groups[..n]
            .iter()
            .any(|o| o.topic == g.topic && o.name == g.name)
        {
            return Err(format!(
                "group `{}` of topic `{}` is declared twice",
                g.name, g.topic
            ));
        }
    }
    Ok(())
}

/// The check of `[[groups]]`.
pub(super) const RULES: &[Rule<Settings>] = &[Rule {
    settings: &["groups"],
    check: |s| check(&s.groups),
}];

/// Reads either form: a list of tables (TOML) or one text of pairs (the environment).
pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<GroupSpec>, D::Error> {
    pairs::deserialize(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_at_the_last_colon() {
        let groups = parse_pairs(" orders:billing, eu:orders:shipping ,").expect("pairs");
        assert_eq!(
            groups,
            vec![
                GroupSpec::new("orders", "billing"),
                GroupSpec::new("eu:orders", "shipping")
            ]
        );
        assert!(parse_pairs("orders").is_err());
    }

    #[test]
    fn bad_groups_are_named() {
        assert!(check(&[GroupSpec::new("orders", "billing")]).is_ok());
        let twice = [
            GroupSpec::new("orders", "billing"),
            GroupSpec::new("orders", "billing"),
        ];
        assert!(check(&twice).expect_err("refused").contains("twice"));
        assert!(check(&[GroupSpec::new("orders", "")])
            .expect_err("refused")
            .contains("name"));
        assert!(check(&[GroupSpec::new("", "billing")])
            .expect_err("refused")
            .contains("topic"));
        let mut late = GroupSpec::new("orders", "billing");
        late.start = "5-0".into();
        assert!(check(&[late]).expect_err("refused").contains("start"));
    }
}
