//! The Lua script that publishes a topic's batch atomically with its dedup records.
//!
//! Redis runs a script without interleaving other commands, so "is this id already in the
//! stream?" and "append it and remember it" cannot be split by another replica, and a crash
//! mid-script loses the whole script: its effects reach the AOF and the replicas only as one
//! MULTI/EXEC unit, after it returns. `redis.pcall` keeps one event's failure (WRONGTYPE, ...)
//! from aborting the others; after a failure, the rest of that event's chain (same partition
//! key) is skipped to keep order.
//!
//! Every argument costs Redis an object, a Lua string and a copy back, so the call carries
//! only what varies: the field names live in the script and the topic comes once per call.
//! Those names are written into the script from `outbox_core::entry::field`, the one source
//! the consumer library reads them by.

use std::sync::LazyLock;

use outbox_core::entry::field;

use super::marks::EntryId;
use super::{classify_reply, Outcome, PublishError, Verdict};

/// KEYS: stream, current dedup set, previous dedup set, next dedup set, and when there is
/// one, the retired set two buckets back (unlinked at the end: freed in the background).
/// ARGV: ttl, maxlen (0 = none), n, topic, the stream's mark (the last entry id the relay
/// appended there, empty when unknown), the envelope (`c` for CloudEvents, empty for the
/// fields), then per event [`PER_EVENT`] values: id (16 bytes, the dedup member), chain (`k<n>`
/// for a keyed chain, `u<n>` for an unkeyed event), then the `id`, `payload`, `headers`,
/// `created_at` and `key` field values (`key` is ignored for an unkeyed chain). A CloudEvents
/// call sends the `cloudevent` field's value in place of `payload` and leaves the last three
/// empty: its entries are `id` and `cloudevent`.
/// Returns a status string with one letter per event (`p` published, `d` duplicate, `s`
/// skipped, `e` failed), the id of the last entry appended (empty if none), then the message
/// of each failure in order: a letter is cheaper to build, send and read than a string per
/// event. When the stream's last generated id is below the mark (entries the relay wrote are
/// gone) it appends nothing and returns `L`, that id and the first entry's id (each empty
/// when there is no stream).
///
/// `F_ID`, `F_TOPIC`, ... stand for the entry's field names, written in as string literals
/// (see [`SOURCE`]): constants of the script, as cheap as if spelled out.
const TEMPLATE: &str = r#"
local stream, cur, prev, nxt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[1])
local maxlen = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local topic = ARGV[4]
local mark = ARGV[5]
local cloudevents = ARGV[6] == 'c'
local PER = 7
local BASE = 7
if mark ~= '' then
  local last, first = '', ''
  if redis.call('EXISTS', stream) == 1 then
    local info = redis.call('XINFO', 'STREAM', stream)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then last = info[i + 1] end
      if info[i] == 'first-entry' and type(info[i + 1]) == 'table' then first = info[i + 1][1] end
    end
  end
  local mms, mseq = string.match(mark, '^(%d+)-(%d+)$')
  local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
  mms, mseq = tonumber(mms), tonumber(mseq)
  lms, lseq = tonumber(lms or '0'), tonumber(lseq or '0')
  if lms < mms or (lms == mms and lseq < mseq) then return {'L', last, first} end
end
local ids = {}
for e = 1, n do ids[e] = ARGV[BASE + (e - 1) * PER] end
-- One membership query per dedup set for the whole batch, in chunks (unpack's stack limit);
-- the previous and next windows' sets are often absent, and then cost nothing.
local seen = {}
for _, set in ipairs({cur, prev, nxt}) do
  if set == cur or redis.call('EXISTS', set) == 1 then
  for c = 1, n, 1000 do
    local found = redis.call('SMISMEMBER', set, unpack(ids, c, math.min(c + 999, n)))
    for k = 1, #found do
      if found[k] == 1 then seen[c + k - 1] = true end
    end
  end
  end
end
local function xadd(s, keyed)
  local a = ARGV
  if cloudevents then
    if maxlen > 0 then
      return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', F_ID, a[s + 2],
        F_CLOUDEVENT, a[s + 3])
    end
    return redis.pcall('XADD', stream, '*', F_ID, a[s + 2], F_CLOUDEVENT, a[s + 3])
  end
  if maxlen > 0 then
    if keyed then
      return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', F_ID, a[s + 2],
        F_TOPIC, topic, F_PAYLOAD, a[s + 3], F_HEADERS, a[s + 4], F_CREATED_AT, a[s + 5],
        F_KEY, a[s + 6])
    end
    return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', F_ID, a[s + 2],
      F_TOPIC, topic, F_PAYLOAD, a[s + 3], F_HEADERS, a[s + 4], F_CREATED_AT, a[s + 5])
  end
  if keyed then
    return redis.pcall('XADD', stream, '*', F_ID, a[s + 2], F_TOPIC, topic,
      F_PAYLOAD, a[s + 3], F_HEADERS, a[s + 4], F_CREATED_AT, a[s + 5], F_KEY, a[s + 6])
  end
  return redis.pcall('XADD', stream, '*', F_ID, a[s + 2], F_TOPIC, topic,
    F_PAYLOAD, a[s + 3], F_HEADERS, a[s + 4], F_CREATED_AT, a[s + 5])
end
local status = {}
local errors = {}
local failed = {}
local added = {}
local lastid = ''
for e = 1, n do
  local s = BASE + (e - 1) * PER
  local chain = ARGV[s + 1]
  if failed[chain] then
    status[e] = 's'
  elseif seen[e] then
    status[e] = 'd'
  else
    local r = xadd(s, string.byte(chain, 1) == 107)
    if type(r) == 'table' and r.err then
      status[e] = 'e'
      errors[#errors + 1] = r.err
      failed[chain] = true
    else
      added[#added + 1] = ids[e]
      lastid = r
      status[e] = 'p'
    end
  end
end
-- Remembered together at the end: a script is all or nothing across a crash, and after the
-- first write Redis no longer refuses writes for memory, so this cannot fail half way.
if #added > 0 then
  for c = 1, #added, 1000 do
    redis.call('SADD', cur, unpack(added, c, math.min(c + 999, #added)))
  end
  redis.call('EXPIRE', cur, ttl)
end
-- Last, so it is never the write that lets the XADDs past a full Redis (a script's first
-- write decides whether it is refused for memory; UNLINK is never refused, it frees).
if KEYS[5] then redis.call('UNLINK', KEYS[5]) end
local out = {table.concat(status), lastid}
for k = 1, #errors do out[k + 2] = errors[k] end
return out
"#;

/// Values sent per event after the call's header (see [`SOURCE`]).
pub const PER_EVENT: usize = 7;

/// The template's stand-ins and the entry's field names they stand for.
const FIELDS: [(&str, &str); 7] = [
    ("F_ID", field::ID),
    ("F_TOPIC", field::TOPIC),
    ("F_PAYLOAD", field::PAYLOAD),
    ("F_HEADERS", field::HEADERS),
    ("F_CREATED_AT", field::CREATED_AT),
    ("F_KEY", field::KEY),
    ("F_CLOUDEVENT", field::CLOUDEVENT),
];

/// The script's source: [`TEMPLATE`] with the entry's field names written in.
pub static SOURCE: LazyLock<String> = LazyLock::new(|| {
    FIELDS
        .iter()
        .fold(TEMPLATE.to_string(), |source, (stand_in, name)| {
            source.replace(stand_in, &format!("'{name}'"))
        })
});

/// The script, called by its hash (EVALSHA); after a NOSCRIPT the publisher sends it once with
/// EVAL, which caches it on the node that ran it.
pub static PUBLISH: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&SOURCE));

/// What one script call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// One outcome per event, and the last entry appended (if any).
    Done(Vec<Outcome>, Option<EntryId>),
    /// The stream is behind its mark: nothing appended. Its last generated id and its first
    /// entry's id, when it exists.
    Behind {
        /// The stream's last generated id.
        last: Option<EntryId>,
        /// Its oldest entry.
        first: Option<EntryId>,
    },
}

/// Reads the script's reply (`sent` events were in the call).
pub fn parse_reply(reply: &[String], sent: usize) -> Result<Reply, PublishError> {
    let unexpected = || PublishError::Outage(format!("unexpected script reply {reply:?}"));
    let id = |text: &String| -> Result<Option<EntryId>, PublishError> {
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|_| unexpected())
    };
    if let [status, last, first] = reply {
        if status == "L" {
            return Ok(Reply::Behind {
                last: id(last)?,
                first: id(first)?,
            });
        }
    }
    let (status, last, mut errors) = match reply {
        [status, last, errors @ ..] if status.len() == sent => (status, last, errors.iter()),
        _ => return Err(unexpected()),
    };
    let mut outcomes = Vec::with_capacity(sent);
    for letter in status.bytes() {
        outcomes.push(match letter {
            b'p' => Outcome::Published,
            b'd' => Outcome::Duplicate,
            b's' => Outcome::Skipped,
            b'e' => {
                let message = errors.next().ok_or_else(unexpected)?;
                match classify_reply(message) {
                    Verdict::Outage => return Err(PublishError::Outage(message.clone())),
                    Verdict::EventFault => Outcome::Failed(message.clone()),
                }
            }
            _ => return Err(unexpected()),
        });
    }
    if errors.next().is_some() {
        return Err(unexpected());
    }
    Ok(Reply::Done(outcomes, id(last)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_field_names_are_the_shared_cores() {
        assert!(!SOURCE.contains("F_"), "every stand-in is written in");
        for (stand_in, name) in FIELDS {
            let quoted = format!("'{name}'");
            assert_eq!(
                TEMPLATE.matches(&quoted).count(),
                0,
                "the template spells {quoted} itself instead of {stand_in}"
            );
            // Each XADD variant names every field it writes: `key` only the two keyed ones,
            // `cloudevent` only the two CloudEvents ones, `id` all six.
            let want = match name {
                field::KEY | field::CLOUDEVENT => 2,
                field::ID => 6,
                _ => 4,
            };
            assert_eq!(SOURCE.matches(&quoted).count(), want, "{quoted}");
        }
    }

    fn reply(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_reply_gives_one_outcome_per_event_with_failures_in_order() {
        let parsed = parse_reply(
            &reply(&["pdeps", "7-1", "WRONGTYPE Operation against a key"]),
            5,
        )
        .expect("parsed");
        let Reply::Done(outcomes, last) = parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!(last, Some(EntryId { ms: 7, seq: 1 }));
        assert_eq!(
            outcomes,
            vec![
                Outcome::Published,
                Outcome::Duplicate,
                Outcome::Failed("WRONGTYPE Operation against a key".into()),
                Outcome::Published,
                Outcome::Skipped,
            ]
        );
    }

    #[test]
    fn a_stream_behind_its_mark_is_reported_with_its_ids() {
        assert_eq!(
            parse_reply(&reply(&["L", "5-2", "1-0"]), 3).expect("parsed"),
            Reply::Behind {
                last: Some(EntryId { ms: 5, seq: 2 }),
                first: Some(EntryId { ms: 1, seq: 0 })
            }
        );
        assert_eq!(
            parse_reply(&reply(&["L", "", ""]), 1).expect("parsed"),
            Reply::Behind {
                last: None,
                first: None
            }
        );
    }

    #[test]
    fn a_reply_that_does_not_match_the_call_is_an_outage_not_a_verdict() {
        for (parts, sent) in [
            (vec!["pp", ""], 3),
            (vec!["pe", "1-0"], 2),
            (vec!["pp", "1-0", "extra"], 2),
            (vec!["px", ""], 2),
            (vec!["pp", "nope"], 2),
            (vec!["pp"], 2),
            (vec![], 0),
        ] {
            assert!(
                matches!(
                    parse_reply(&reply(&parts), sent),
                    Err(PublishError::Outage(_))
                ),
                "{parts:?}"
            );
        }
    }
}
