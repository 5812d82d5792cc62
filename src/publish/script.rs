//! The Lua script that publishes a topic's batch atomically with its dedup records.
//!
//! Redis runs a script without interleaving other commands, so "is this id already in the
//! stream?" and "append it and remember it" cannot be split by a crash or by another replica.
//! `redis.pcall` keeps one event's failure (WRONGTYPE, ...) from aborting the others; after a
//! failure, the rest of that event's chain (same partition key) is skipped to keep order.

use std::sync::LazyLock;

use super::{classify_reply, Outcome, PublishError, Verdict};

/// KEYS: stream, current dedup set, previous dedup set, next dedup set.
/// ARGV: ttl, maxlen (0 = none), n, then per event: id (16 bytes), chain, nfields, fields...
/// Returns one string per event: `ok:<entry id>`, `dup`, `skip` or `err:<message>`.
const SOURCE: &str = r#"
local stream, cur, prev, nxt = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl = tonumber(ARGV[1])
local maxlen = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local ids, starts = {}, {}
local i = 4
for e = 1, n do
  ids[e] = ARGV[i]
  starts[e] = i
  i = i + 3 + 2 * tonumber(ARGV[i + 2])
end
-- One membership query per dedup set for the whole batch, in chunks (unpack's stack limit).
local seen = {}
for _, set in ipairs({cur, prev, nxt}) do
  for c = 1, n, 1000 do
    local found = redis.call('SMISMEMBER', set, unpack(ids, c, math.min(c + 999, n)))
    for k = 1, #found do
      if found[k] == 1 then seen[c + k - 1] = true end
    end
  end
end
local out = {}
local failed = {}
local wrote = false
for e = 1, n do
  local s = starts[e]
  local chain = ARGV[s + 1]
  local nf = tonumber(ARGV[s + 2])
  if failed[chain] then
    out[e] = 'skip'
  elseif seen[e] then
    out[e] = 'dup'
  else
    local args = {'XADD', stream}
    if maxlen > 0 then
      args[3] = 'MAXLEN'
      args[4] = '~'
      args[5] = maxlen
    end
    args[#args + 1] = '*'
    for j = s + 3, s + 2 + 2 * nf do
      args[#args + 1] = ARGV[j]
    end
    local r = redis.pcall(unpack(args))
    if type(r) == 'table' and r.err then
      out[e] = 'err:' .. r.err
      failed[chain] = true
    else
      -- Remembered right after its append, not at the end: a script cut short (a Redis
      -- crash) leaves at most this one event appended and not remembered.
      redis.call('SADD', cur, ids[e])
      wrote = true
      out[e] = 'ok:' .. r
    end
  end
end
if wrote then redis.call('EXPIRE', cur, ttl) end
return out
"#;

/// The loaded script (EVALSHA, reloaded by the client after a Redis restart's NOSCRIPT).
pub static PUBLISH: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SOURCE));

/// Parses one per-event reply of the script.
pub fn parse_reply(reply: &str) -> Result<Outcome, PublishError> {
    if let Some(entry) = reply.strip_prefix("ok:") {
        return Ok(Outcome::Published(entry.to_string()));
    }
    if let Some(message) = reply.strip_prefix("err:") {
        return match classify_reply(message) {
            Verdict::Outage => Err(PublishError::Outage(message.to_string())),
            Verdict::EventFault => Ok(Outcome::Failed(message.to_string())),
        };
    }
    match reply {
        "dup" => Ok(Outcome::Duplicate),
        "skip" => Ok(Outcome::Skipped),
        other => Err(PublishError::Outage(format!(
            "unexpected script reply {other:?}"
        ))),
    }
}
