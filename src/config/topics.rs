//! Topics as configuration: TOML `[[topics]]` tables with `name`, `partitions` (default 1),
//! `envelope` (default `redis.envelope`) and `park_on_dead` (default false), or `OUTBOX__TOPICS` as comma-separated `topic:N`
//! pairs. A topic not listed has one partition and keeps the stream `<prefix><topic>`; one
//! with N > 1 has the streams `<prefix><topic>:0` to `<prefix><topic>:N-1`.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

use super::pairs::{self, Pair};
use super::rule::Rule;
use super::Settings;
use outbox_core::cloudevent::Envelope;
use outbox_core::partition::MAX_PARTITIONS;

/// One configured topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    /// The topic.
    pub name: String,
    /// Its partitions, 1 to 1024.
    #[serde(default = "one")]
    pub partitions: u32,
    /// How its entries are written, when not as `redis.envelope` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
    /// Once an event of the topic is dead, its key's later events wait (not published, no
    /// attempt spent) until it is retried and published, or discarded.
    #[serde(default)]
    pub park_on_dead: bool,
}

fn one() -> u32 {
    1
}

impl Pair for TopicSpec {
    const EXAMPLE: &'static str = "OUTBOX__TOPICS=orders:8,payments:4";
    const TABLE: &'static str = "{name, partitions}";

    fn from_pair(topic: &str, partitions: &str) -> Result<Self, String> {
        let partitions = partitions.parse().map_err(|_| {
            format!("topic `{topic}`: `{partitions}` is not a number of partitions")
        })?;
        Ok(TopicSpec {
            name: topic.to_string(),
            partitions,
            envelope: None,
            park_on_dead: false,
        })
    }
}

/// Reads either form: a list of tables (TOML) or one text of pairs (the environment).
pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TopicSpec>, D::Error> {
    pairs::deserialize(d)
}

/// What is wrong with the configured topics, if anything.
pub fn check(topics: &[TopicSpec]) -> Result<(), String> {
    for (n, t) in topics.iter().enumerate() {
        if !outbox_core::topic::is_valid(&t.name) {
            return Err(format!(
                "`{}` breaks the topic rule ({})",
                t.name,
                outbox_core::topic::RULE
            ));
        }
        if !(1..=MAX_PARTITIONS).contains(&t.partitions) {
            return Err(format!(
                "topic `{}`: partitions must be 1 to {MAX_PARTITIONS}, not {}",
                t.name, t.partitions
            ));
        }
        if topics[..n].iter().any(|o| o.name == t.name) {
            return Err(format!("topic `{}` is listed twice", t.name));
        }
    }
    Ok(())
}

/// The check of `[[topics]]`.
pub(super) const RULES: &[Rule<Settings>] = &[Rule {
    settings: &["topics"],
    check: |s| check(&s.topics),
}];

impl Settings {
    /// The envelope of each listed topic that sets its own.
    pub fn configured_envelopes(&self) -> std::collections::HashMap<String, Envelope> {
        self.topics
            .iter()
            .filter_map(|t| Some((t.name.clone(), t.envelope?)))
            .collect()
    }

    /// The listed topics with `park_on_dead`.
    pub fn parking_topics(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter(|t| t.park_on_dead)
            .map(|t| t.name.clone())
            .collect()
    }

    /// The configured partition count of each listed topic.
    pub fn configured_partitions(&self) -> std::collections::HashMap<String, u32> {
        self.topics
            .iter()
            .map(|t| (t.name.clone(), t.partitions))
            .collect()
    }
}

/// The configured partitions of `topic`: 1 when it is not listed.
pub fn partitions_of(topics: &[TopicSpec], topic: &str) -> u32 {
    topics
        .iter()
        .find(|t| t.name == topic)
        .map_or(1, |t| t.partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_name_topics_and_counts() {
        let topics: Vec<TopicSpec> = pairs::parse(" orders:8, eu:payments:4 ,").expect("pairs");
        assert_eq!(
            topics,
            vec![
                TopicSpec {
                    name: "orders".into(),
                    partitions: 8,
                    envelope: None,
                    park_on_dead: false,
                },
                TopicSpec {
                    name: "eu:payments".into(),
                    partitions: 4,
                    envelope: None,
                    park_on_dead: false,
                }
            ]
        );
        assert_eq!(partitions_of(&topics, "orders"), 8);
        assert_eq!(partitions_of(&topics, "other"), 1);
        assert!(pairs::parse::<TopicSpec>("orders:eight")
            .expect_err("refused")
            .contains("eight"));
        assert!(check(&topics).is_ok());
    }

    #[test]
    fn bad_topics_are_named() {
        let t = |name: &str, partitions| TopicSpec {
            name: name.into(),
            partitions,
            envelope: None,
            park_on_dead: false,
        };
        assert!(check(&[t("orders", 0)])
            .expect_err("0")
            .contains("1 to 1024"));
        assert!(check(&[t("orders", 1025)]).is_err());
        assert!(check(&[t("a b", 2)])
            .expect_err("blank")
            .contains("topic rule"));
        assert!(check(&[t("o", 2), t("o", 3)])
            .expect_err("twice")
            .contains("twice"));
    }
}
