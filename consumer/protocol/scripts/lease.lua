-- outbox consumer protocol 1: lease.lua
-- One lease call on one partition stream for a group (docs/protocol.md, "Leases and epochs").
-- The owner key holds the owning consumer's name and expires with the lease; the epoch key
-- counts the owners the partition has had, so a higher epoch is always a later owner.
-- `renew` and `take` both extend a lease this consumer already holds; `take` also takes a
-- free lease (no owner key) and raises the epoch; `release` deletes the owner key if it is
-- this consumer's.
-- KEYS[1]: the owner key, `{<stream>}:owner:<group>` (see docs/protocol.md for the braces).
-- KEYS[2]: the epoch key, `{<stream>}:epoch:<group>`.
-- ARGV[1]: the consumer's name.
-- ARGV[2]: the lease in milliseconds (`claim_idle`).
-- ARGV[3]: `renew`, `take` or `release`.
-- Returns: the epoch held (>= 1: renewed, or newly taken with the raised epoch); 0 for
-- `release`; -1 when another consumer holds the lease, or (`renew`) when this one no
-- longer does.
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
