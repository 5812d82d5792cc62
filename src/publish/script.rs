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
local out = {}
local failed = {}
local wrote = false
local i = 4
for e = 1, n do
  local id = ARGV[i]
  local chain = ARGV[i + 1]
  local nf = tonumber(ARGV[i + 2])
  local first = i + 3
  i = first + 2 * nf
  if failed[chain] then
    out[e] = 'skip'
  elseif redis.call('SISMEMBER', cur, id) == 1 or redis.call('SISMEMBER', prev, id) == 1
      or redis.call('SISMEMBER', nxt, id) == 1 then
    out[e] = 'dup'
  else
    local args = {'XADD', stream}
    if maxlen > 0 then
      args[#args + 1] = 'MAXLEN'
      args[#args + 1] = '~'
      args[#args + 1] = maxlen
    end
    args[#args + 1] = '*'
    for j = first, first + 2 * nf - 1 do
      args[#args + 1] = ARGV[j]
    end
    local r = redis.pcall(unpack(args))
    if type(r) == 'table' and r.err then
      out[e] = 'err:' .. r.err
      failed[chain] = true
    else
      redis.call('SADD', cur, id)
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
