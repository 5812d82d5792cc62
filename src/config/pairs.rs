//! Settings that are a list of tables in TOML and a text of `topic:value` pairs in the
//! environment (`OUTBOX__GROUPS=orders:billing`, `OUTBOX__TOPICS=orders:8`): one reader for
//! both forms. A pair splits at its last colon, so a topic may hold colons.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};

/// An item that can be written as a `topic:value` pair.
pub(super) trait Pair: DeserializeOwned {
    /// What the setting looks like in the environment, for errors.
    const EXAMPLE: &'static str;
    /// What a list of tables holds, for errors.
    const TABLE: &'static str;

    /// The item of one pair, or what is wrong with it.
    fn from_pair(topic: &str, value: &str) -> Result<Self, String>;
}

/// Parses `topic:value,topic:value` (blanks around items ignored).
pub(super) fn parse<T: Pair>(text: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.rsplit_once(':') {
            Some((topic, value)) => T::from_pair(topic.trim(), value.trim()),
            None => Err(format!(
                "`{item}` is not a topic:value pair (e.g. {})",
                T::EXAMPLE
            )),
        })
        .collect()
}

/// Reads either form: a list of tables (TOML) or one text of pairs (the environment).
pub(super) fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Pair,
{
    struct Items<T>(PhantomData<T>);

    impl<'de, T: Pair> Visitor<'de> for Items<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a list of {} tables, or topic:value pairs", T::TABLE)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse(v).map_err(E::custom)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<T>()? {
                items.push(item);
            }
            Ok(items)
        }
    }

    d.deserialize_any(Items(PhantomData))
}
