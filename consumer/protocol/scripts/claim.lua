-- outbox consumer protocol 1: claim.lua
-- XCLAIM on a partition stream, only while this consumer holds the partition's lease
-- (docs/protocol.md, "Reading and acknowledging under a lease"): every move of a fenced
-- partition's entries into a consumer's pending list goes through a lease check.
-- KEYS[1]: the partition stream. KEYS[2]: its owner key, `{<stream>}:owner:<group>`.
-- ARGV[1]: the group. ARGV[2]: the consumer's name.
-- ARGV[3..]: what follows the consumer in XCLAIM: min-idle-time, the ids, then options
-- (taking a pending entry for delivery n: `0 <id> RETRYCOUNT <n> JUSTID`; keeping entries
-- in hand: `<min idle ms> <id> ... JUSTID`).
-- Returns: XCLAIM's reply, or -1 (an integer) when this consumer does not hold the lease.
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
return redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 3))
