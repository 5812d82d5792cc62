//! How far the relay knows each stream reached: the id of the last entry it appended there.
//!
//! Redis entry ids only grow, so a stream whose last generated id is below its mark has lost
//! entries the relay wrote (a restart from an older snapshot, a failover without waiting, a
//! flush). The publish script compares before it appends; the marks live here, in memory,
//! shared by every clone of the publisher, and in `outbox_stream_marks` across restarts
//! (`relay::marks`).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

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

/// The marks of every stream this process publishes to, and which changed since last saved.
#[derive(Clone, Default)]
pub struct Marks {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    by_stream: HashMap<String, EntryId>,
    unsaved: HashMap<String, EntryId>,
}

impl Marks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mark of `stream`, if known.
    pub fn get(&self, stream: &str) -> Option<EntryId> {
        self.lock().by_stream.get(stream).copied()
    }

    /// `stream` reached `id` (kept only if higher); to be saved.
    pub fn reached(&self, stream: &str, id: EntryId) {
        let mut inner = self.lock();
        let mark = inner.by_stream.entry(stream.to_string()).or_insert(id);
        if *mark < id {
            *mark = id;
        }
        let mark = *mark;
        inner.unsaved.insert(stream.to_string(), mark);
    }

    /// Marks read back from storage: kept where higher than what this process knows.
    pub fn load(&self, stored: impl IntoIterator<Item = (String, EntryId)>) {
        let mut inner = self.lock();
        for (stream, id) in stored {
            let mark = inner.by_stream.entry(stream).or_insert(id);
            if *mark < id {
                *mark = id;
            }
        }
    }

    /// After a loss was handled: `stream` now stands at `id` (or holds nothing).
    pub fn reset(&self, stream: &str, id: Option<EntryId>) {
        let mut inner = self.lock();
        inner.unsaved.remove(stream);
        match id {
            Some(id) => inner.by_stream.insert(stream.to_string(), id),
            None => inner.by_stream.remove(stream),
        };
    }

    /// The marks changed since the last call (to save); they count as saved.
    pub fn take_unsaved(&self) -> Vec<(String, EntryId)> {
        self.lock().unsaved.drain().collect()
    }

    /// Puts back marks whose save failed (unless newer ones came meanwhile).
    pub fn unsaved_again(&self, marks: Vec<(String, EntryId)>) {
        let mut inner = self.lock();
        for (stream, id) in marks {
            inner.unsaved.entry(stream).or_insert(id);
        }
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

    #[test]
    fn a_mark_only_rises_until_reset() {
        let marks = Marks::default();
        let id = |s: &str| s.parse::<EntryId>().expect("id");
        marks.reached("s", id("5-0"));
        marks.reached("s", id("4-0"));
        marks.load([("s".to_string(), id("3-0")), ("t".to_string(), id("1-1"))]);
        assert_eq!(marks.get("s"), Some(id("5-0")));
        assert_eq!(marks.get("t"), Some(id("1-1")));
        assert_eq!(marks.take_unsaved(), vec![("s".to_string(), id("5-0"))]);
        assert!(marks.take_unsaved().is_empty());
        marks.reset("s", Some(id("2-0")));
        assert_eq!(marks.get("s"), Some(id("2-0")));
        marks.reset("t", None);
        assert_eq!(marks.get("t"), None);
    }
}
