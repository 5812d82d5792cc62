//! How far the relay knows each stream reached: the id of the last entry it appended there.
//!
//! Redis entry ids only grow, so a stream whose last generated id is below its mark has lost
//! entries the relay wrote (a restart from an older snapshot, a failover without waiting, a
//! flush). The publish script compares before it appends; the marks live here, in memory,
//! shared by every clone of the publisher, and in `outbox_stream_marks` across restarts
//! (`relay::marks`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use outbox_core::entry_id::EntryId;

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
