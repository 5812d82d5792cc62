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

use std::sync::LazyLock;

use super::{classify_reply, Outcome, PublishError, Verdict};

/// KEYS: stream, current dedup set, previous dedup set, next dedup set, and when there is
/// one, the retired set two buckets back (unlinked at the end: freed in the background).
/// ARGV: ttl, maxlen (0 = none), n, topic, then per event [`PER_EVENT`] values: id (16
/// bytes, the dedup member), chain (`k<n>` for a keyed chain, `u<n>` for an unkeyed event),
/// then the `id`, `payload`, `headers`, `created_at` and `key` field values (`key` is ignored
/// for an unkeyed chain).
/// Returns a status string with one letter per event (`p` published, `d` duplicate, `s`
/// skipped, `e` failed), then the message of each failure in order: the entry ids are not
/// needed, and a letter is cheaper to build, send and read than a string per event.
pub const SOURCE: &str = r#"
local stream, cur, prev, nxt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[1])
local maxlen = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local topic = ARGV[4]
local PER = 7
local ids = {}
for e = 1, n do ids[e] = ARGV[5 + (e - 1) * PER] end
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
  if maxlen > 0 then
    if keyed then
      return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'id', a[s + 2],
        'topic', topic, 'payload', a[s + 3], 'headers', a[s + 4], 'created_at', a[s + 5],
        'key', a[s + 6])
    end
    return redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'id', a[s + 2],
      'topic', topic, 'payload', a[s + 3], 'headers', a[s + 4], 'created_at', a[s + 5])
  end
  if keyed then
    return redis.pcall('XADD', stream, '*', 'id', a[s + 2], 'topic', topic,
      'payload', a[s + 3], 'headers', a[s + 4], 'created_at', a[s + 5], 'key', a[s + 6])
  end
  return redis.pcall('XADD', stream, '*', 'id', a[s + 2], 'topic', topic,
    'payload', a[s + 3], 'headers', a[s + 4], 'created_at', a[s + 5])
end
local status = {}
local errors = {}
local failed = {}
local added = {}
for e = 1, n do
  local s = 5 + (e - 1) * PER
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
local out = {table.concat(status)}
for k = 1, #errors do out[k + 1] = errors[k] end
return out
"#;

/// Values sent per event after the call's header (see [`SOURCE`]).
pub const PER_EVENT: usize = 7;

/// The script, called by its hash (EVALSHA); after a NOSCRIPT the publisher sends it once with
/// EVAL, which caches it on the node that ran it.
pub static PUBLISH: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE));

/// Reads the script's reply into one outcome per event (`sent` events were in the call).
pub fn parse_reply(reply: &[String], sent: usize) -> Result<Vec<Outcome>, PublishError> {
    let unexpected = || PublishError::Outage(format!("unexpected script reply {reply:?}"));
    let (status, mut errors) = match reply.split_first() {
        Some((status, errors)) if status.len() == sent => (status, errors.iter()),
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
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_reply_gives_one_outcome_per_event_with_failures_in_order() {
        let outcomes = parse_reply(&reply(&["pdeps", "WRONGTYPE Operation against a key"]), 5)
            .expect("parsed");
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
    fn a_reply_that_does_not_match_the_call_is_an_outage_not_a_verdict() {
        for (parts, sent) in [
            (vec!["pp"], 3),
            (vec!["pe"], 2),
            (vec!["pp", "extra"], 2),
            (vec!["px"], 2),
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
