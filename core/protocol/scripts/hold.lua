-- outbox consumer protocol 1: hold.lua
-- Holds an entry of a parked key (docs/protocol.md, "Parked keys"): appends it to the key's
-- held list while the key is parked. The caller then acknowledges the entry in the stream.
-- KEYS[1]: the group's parked hash, `<prefix><topic>:{<group>}:parked`.
-- KEYS[2]: the key's held list, `<prefix><topic>:{<group>}:held:<key>`.
-- ARGV[1]: the partition key.
-- ARGV[2]: the entry, JSON {"stream": its stream, "id": its stream id, "fields": [[name,
-- value], ...] in stream order}.
-- Returns: 1 when held; 0 when the key is not parked (any more): handle the entry instead.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
