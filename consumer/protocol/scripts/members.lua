-- outbox consumer protocol 1: members.lua
-- A consumer's membership in a group's fleet on a partitioned topic (docs/protocol.md,
-- "Membership"). Drops the members whose membership expired, renews this one (score: its
-- expiry in Redis server milliseconds, from TIME) and keeps the set itself alive for twice
-- the ttl plus a minute; or, with `leave`, removes this consumer at once (a clean stop).
-- KEYS[1]: the members sorted set, `<prefix><topic>:{<group>}:members`.
-- ARGV[1]: the consumer's name.
-- ARGV[2]: the membership ttl in milliseconds (the lease, `claim_idle`; any number with `leave`).
-- ARGV[3]: `join` (anything but `leave` joins) or `leave`.
-- Returns: the live members' names (ascending by expiry, ZRANGE order; sort them before
-- assigning); an empty array for `leave`.
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
