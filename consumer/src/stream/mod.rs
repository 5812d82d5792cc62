//! The entries as the consumer holds them (`RawEntry`, `EntryRef`), grouped per stream and
//! per hash slot; `setup` resolves the streams and creates the group, `reply` parses read
//! replies, `dead` writes dead letters. The commands that read and settle entries are the
//! sources' ([`crate::source`]).

use std::sync::Arc;

use redis::cluster_routing::Slot;
use redis::Value;

use outbox_core::entry::{field, value_text};

mod dead;
mod reply;
mod setup;

pub(crate) use dead::{dead_letter, dead_letter_held};
pub(crate) use reply::{parse_entries, parse_read_reply};
pub(crate) use setup::{ensure_group, resolve_partitions};

/// One entry as Redis returned it: its stream's key, its id and its fields in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawEntry {
    pub(crate) stream: Arc<str>,
    pub(crate) stream_id: String,
    pub(crate) fields: Vec<(String, Value)>,
}

impl RawEntry {
    /// Where the entry is: its stream and id (ids are unique within one stream only).
    pub(crate) fn at(&self) -> EntryRef {
        EntryRef {
            stream: self.stream.clone(),
            id: self.stream_id.clone(),
        }
    }

    /// The `key` field as text, if present: the lane of an entry that failed to parse.
    pub(crate) fn key_field(&self) -> Option<String> {
        self.fields
            .iter()
            .find(|(k, _)| k == field::KEY)
            .and_then(|(_, v)| value_text(v))
    }
}

/// An entry's place: its stream's key and its id there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryRef {
    pub(crate) stream: Arc<str>,
    pub(crate) id: String,
}

/// The ids of `refs`, per stream, streams in order of first appearance: one XACK or XCLAIM
/// per stream.
pub(crate) fn by_stream<'a>(
    refs: impl IntoIterator<Item = &'a EntryRef>,
) -> Vec<(Arc<str>, Vec<String>)> {
    let mut out: Vec<(Arc<str>, Vec<String>)> = Vec::new();
    for r in refs {
        match out.iter_mut().find(|(stream, _)| *stream == r.stream) {
            Some((_, ids)) => ids.push(r.id.clone()),
            None => out.push((r.stream.clone(), vec![r.id.clone()])),
        }
    }
    out
}

/// `items` grouped so that each group's keys (`key_of`) share one hash slot, groups in order
/// of first appearance: a Redis Cluster refuses a pipeline or script across slots. Off a
/// cluster, one group.
pub(crate) fn by_slot<T>(items: Vec<T>, key_of: impl Fn(&T) -> &str, cluster: bool) -> Vec<Vec<T>> {
    if items.is_empty() {
        return Vec::new();
    }
    if !cluster {
        return vec![items];
    }
    let mut groups: Vec<(Slot, Vec<T>)> = Vec::new();
    for item in items {
        let slot = Slot::for_key(key_of(&item).as_bytes());
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(item),
            None => groups.push((slot, vec![item])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}
