//! A stream entry id, `<ms>-<seq>`, as Redis generates and orders them: the relay keeps, per
//! stream, the last id it appended (its mark, in memory and in `outbox_stream_marks`), so a
//! stream whose last id is below its mark is known to have lost entries.

use std::fmt;
use std::str::FromStr;

/// A stream entry id, `<ms>-<seq>`, ordered as Redis orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryId {
    /// Milliseconds part (Redis's clock when it was added).
    pub ms: u64,
    /// Sequence within that millisecond.
    pub seq: u64,
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Not a `<ms>-<seq>` entry id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a stream entry id: {0:?}")]
pub struct BadEntryId(pub String);

impl FromStr for EntryId {
    type Err = BadEntryId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadEntryId(s.to_string());
        let (ms, seq) = s.split_once('-').ok_or_else(bad)?;
        Ok(EntryId {
            ms: ms.parse().map_err(|_| bad())?,
            seq: seq.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_parse_print_and_order_as_redis_does() {
        let a: EntryId = "1733390000000-9".parse().expect("id");
        let b: EntryId = "1733390000000-10".parse().expect("id");
        let c: EntryId = "1733390000001-0".parse().expect("id");
        assert!(a < b && b < c);
        assert_eq!(b.to_string(), "1733390000000-10");
        assert!("12".parse::<EntryId>().is_err());
        assert!("a-1".parse::<EntryId>().is_err());
    }
}
