-- outbox consumer protocol 1: unpark.lua
-- Forgets a released key whose held entries are all handled: the key flows again
-- (docs/protocol.md, "Parked keys").
-- KEYS[1]: the group's parked hash, `<prefix><topic>:{<group>}:parked`.
-- KEYS[2]: the key's held list, `<prefix><topic>:{<group>}:held:<key>`.
-- ARGV[1]: the partition key.
-- Returns: 1 when the key was forgotten; 0 when it is not parked, not released, or still
-- has held entries.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
if not cjson.decode(cur).released then return 0 end
if redis.call('LLEN', KEYS[2]) > 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
