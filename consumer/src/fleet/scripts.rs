//! The fleet's Redis scripts. Each touches one hash slot: the members set alone, or one
//! partition stream with its lease and epoch keys (which carry the stream's slot), so they
//! run on a Redis Cluster as on one Redis. Every command that moves entries of a partition
//! into a consumer's pending list checks the lease in the same script: a consumer that lost
//! the partition (frozen past its lease, then resumed) cannot read or take its entries.
//!
//! The scripts' text lives in `consumer/protocol/scripts/`, where the Python and TypeScript
//! clients copy it from (docs/protocol.md): every client of a fleet runs the same bytes.

use redis::{RedisResult, Script, Value};

use outbox_core::RedisConn;

/// Joins (renews) or leaves a fleet's members set; returns the live names.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/members.lua`.
const MEMBERS: &str = include_str!("../../protocol/scripts/members.lua");

/// Renews, takes or releases a partition's lease; returns the epoch held, 0 or -1.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/lease.lua`.
const LEASE: &str = include_str!("../../protocol/scripts/lease.lua");

/// The fenced read of new entries: `{'e', reply}`, `{'w', last ids}`, `{'n'}` or `{'p', streams}`.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/read.lua`.
const READ: &str = include_str!("../../protocol/scripts/read.lua");

/// XCLAIM only while holding the partition's lease; -1 without it.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/claim.lua`.
const CLAIM: &str = include_str!("../../protocol/scripts/claim.lua");

/// The hand-over: every pending entry of the partition taken, under the lease; -1 without it.
/// KEYS, ARGV and reply: the header of `consumer/protocol/scripts/hand_over.lua`.
const HAND_OVER: &str = include_str!("../../protocol/scripts/hand_over.lua");

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
