-- outbox consumer protocol 1: release.lua
-- An operator releases a parked key (the relay's admin API runs it; docs/protocol.md, "Parked
-- keys"): marks the state released and, for a redrive, puts the dead entry in front of the
-- held ones, so the group's consumers handle it first, then the held entries in order.
-- KEYS[1]: the group's parked hash, `<prefix><topic>:{<group>}:parked`.
-- KEYS[2]: the key's held list, `<prefix><topic>:{<group>}:held:<key>`.
-- ARGV[1]: the partition key. ARGV[2]: `discard` or `redrive`.
-- ARGV[3]: for a redrive, the dead entry as a held entry (JSON {"stream", "id", "fields"});
-- ignored for a discard.
-- Returns: how many entries will take effect (the held list's length, the redriven one
-- included), or -1 when the key is not parked or already released.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return -1 end
local state = cjson.decode(cur)
if state.released then return -1 end
state.released = true
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(state))
if ARGV[2] == 'redrive' then redis.call('LPUSH', KEYS[2], ARGV[3]) end
return redis.call('LLEN', KEYS[2])
