//! The fleet's Redis scripts. Each touches one hash slot: the members set alone, or one
//! partition stream with its lease and epoch keys (which carry the stream's slot), so they
//! run on a Redis Cluster as on one Redis. Every command that moves entries of a partition
//! into a consumer's pending list checks the lease in the same script: a consumer that lost
//! the partition (frozen past its lease, then resumed) cannot read or take its entries.

use redis::{RedisResult, Script, Value};

use outbox_core::RedisConn;

/// KEYS: members. ARGV: consumer, membership ttl ms, `join` or `leave`. Drops expired
/// members, renews this one (score: expiry in server milliseconds), returns the live names.
const MEMBERS: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {}
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * ttl + 60000)
return redis.call('ZRANGE', KEYS[1], 0, -1)
";

/// KEYS: owner, epoch. ARGV: consumer, lease ms, `renew` | `take` | `release`.
/// Returns the epoch held (renewed or newly taken), 0 when released, -1 when another
/// consumer holds the lease or (renew) this one no longer does.
const LEASE: &str = r"
local owner = redis.call('GET', KEYS[1])
if ARGV[3] == 'release' then
  if owner == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
if owner or ARGV[3] ~= 'take' then return -1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return redis.call('INCR', KEYS[2])
";

/// KEYS: streams (n), then the owner keys of the fenced ones. ARGV: group, consumer, count,
/// then per stream the index (1-based) of its owner key among the owner keys, 0 for an
/// unfenced stream. Reads new entries (`XREADGROUP ... >`, not blocking) of the streams whose
/// lease this consumer holds, and of the unfenced ones. Returns `{'e', reply}` with entries;
/// `{'w', {stream, last id, ...}}` when there is nothing new (the ids to block on with XREAD);
/// `{'n'}` when no stream may be read; `{'p', {stream, ...}}`, reading nothing, when this
/// consumer still has entries of those streams pending: an entry read now could overtake an
/// older one of its key, so the loop handles those first whatever its bookkeeping says.
const READ: &str = r"
local n = #ARGV - 3
local streams, held = {}, {}
for i = 1, n do
  local o = tonumber(ARGV[3 + i])
  if o == 0 or redis.call('GET', KEYS[n + o]) == ARGV[2] then
    if #redis.call('XPENDING', KEYS[i], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
      held[#held + 1] = KEYS[i]
    else
      streams[#streams + 1] = KEYS[i]
    end
  end
end
if #held > 0 then return {'p', held} end
if #streams == 0 then return {'n'} end
local args = {'XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS'}
for _, s in ipairs(streams) do args[#args + 1] = s end
for _ in ipairs(streams) do args[#args + 1] = '>' end
local r = redis.call(unpack(args))
if r then return {'e', r} end
local last = {}
for _, s in ipairs(streams) do
  local e = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
  last[#last + 1] = s
  last[#last + 1] = (e[1] and e[1][1]) or '0-0'
end
return {'w', last}
";

/// KEYS: stream, owner. ARGV: group, consumer, then the XCLAIM arguments after the consumer
/// (min idle, ids, options). Runs the XCLAIM only while this consumer holds the lease;
/// returns its reply, or -1 without the lease.
const CLAIM: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
return redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 3))
";

/// KEYS: stream, owner. ARGV: group, consumer. The hand-over: while this consumer holds the
/// lease, takes every entry of the group still pending on the stream, whoever holds it
/// (XAUTOCLAIM with no idle time, no delivery counted). Returns how many, or -1 without the
/// lease.
const HAND_OVER: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
local cursor, taken = '0-0', 0
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, cursor, 'COUNT', 1000, 'JUSTID')
  cursor = r[1]
  taken = taken + #r[2]
until cursor == '0-0'
return taken
";

/// What a lease call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    Renew,
    Take,
    Release,
}

impl LeaseOp {
    fn arg(self) -> &'static str {
        match self {
            LeaseOp::Renew => "renew",
            LeaseOp::Take => "take",
            LeaseOp::Release => "release",
        }
    }
}

/// Renews this consumer's membership and returns the live members' names.
pub(crate) async fn join(
    conn: &mut RedisConn,
    members: &str,
    me: &str,
    ttl_ms: u64,
) -> RedisResult<Vec<String>> {
    Script::new(MEMBERS)
        .key(members)
        .arg(me)
        .arg(ttl_ms)
        .arg("join")
        .invoke_async(conn)
        .await
}

/// Leaves the members set (a clean stop: the others rebalance at once).
pub(crate) async fn leave(conn: &mut RedisConn, members: &str, me: &str) -> RedisResult<()> {
    Script::new(MEMBERS)
        .key(members)
        .arg(me)
        .arg(0)
        .arg("leave")
        .invoke_async::<Value>(conn)
        .await
        .map(|_| ())
}

/// One lease call on a partition: see [`LEASE`] for the reply.
pub(crate) async fn lease(
    conn: &mut RedisConn,
    owner: &str,
    epoch: &str,
    me: &str,
    lease_ms: u64,
    op: LeaseOp,
) -> RedisResult<i64> {
    Script::new(LEASE)
        .key(owner)
        .key(epoch)
        .arg(me)
        .arg(lease_ms)
        .arg(op.arg())
        .invoke_async(conn)
        .await
}

/// One stream to read: its key, and its owner key when it is a fenced partition.
pub(crate) struct ReadTarget<'a> {
    pub(crate) stream: &'a str,
    pub(crate) owner: Option<&'a str>,
}

/// Adds the fenced read of `targets` (streams of one hash slot) to `pipe`: see [`READ`] for
/// the reply. Sent as EVAL with the script's text, so no node can answer NOSCRIPT (a pipeline
/// does not retry that, and on a cluster a loaded script lives on one node only).
pub(crate) fn add_read(
    pipe: &mut redis::Pipeline,
    group: &str,
    me: &str,
    count: usize,
    targets: &[ReadTarget<'_>],
) {
    let owners: Vec<&str> = targets.iter().filter_map(|t| t.owner).collect();
    let cmd = pipe.cmd("EVAL").arg(READ).arg(targets.len() + owners.len());
    let mut owner_index = 0;
    let mut indexes = Vec::with_capacity(targets.len());
    for t in targets {
        cmd.arg(t.stream);
        indexes.push(match t.owner {
            Some(_) => {
                owner_index += 1;
                owner_index
            }
            None => 0,
        });
    }
    cmd.arg(owners).arg(group).arg(me).arg(count).arg(indexes);
}

/// XCLAIM on `stream` as `me`, only while holding its lease (`owner`): `args` are what follows
/// the consumer's name. `None` without the lease.
pub(crate) async fn claim_fenced<T: redis::FromRedisValue>(
    conn: &mut RedisConn,
    stream: &str,
    owner: &str,
    group: &str,
    me: &str,
    args: &[String],
) -> RedisResult<Option<T>> {
    let script = Script::new(CLAIM);
    let mut call = script.key(stream);
    call.key(owner).arg(group).arg(me);
    for a in args {
        call.arg(a);
    }
    let reply: Value = call.invoke_async(conn).await?;
    if matches!(reply, Value::Int(-1)) {
        return Ok(None);
    }
    redis::from_redis_value(reply).map(Some).map_err(Into::into)
}

/// Takes every pending entry of the group on `stream` (the hand-over). `None` without the
/// lease.
pub(crate) async fn hand_over(
    conn: &mut RedisConn,
    stream: &str,
    owner: &str,
    group: &str,
    me: &str,
) -> RedisResult<Option<u64>> {
    let taken: i64 = Script::new(HAND_OVER)
        .key(stream)
        .key(owner)
        .arg(group)
        .arg(me)
        .invoke_async(conn)
        .await?;
    Ok(u64::try_from(taken).ok())
}
