-- outbox consumer protocol 1: unlock.lua
-- Releases the drain lock of a parked key (docs/protocol.md, "Parked keys"): deletes the
-- lock if this consumer holds it. The lock is taken with
-- `SET <held list>:drain <consumer> NX PX <claim_idle ms>`.
-- KEYS[1]: the lock, `<prefix><topic>:{<group>}:held:<key>:drain`.
-- ARGV[1]: the consumer's name.
-- Returns: 1 when deleted, 0 when the lock is not this consumer's (expired, or another's).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
