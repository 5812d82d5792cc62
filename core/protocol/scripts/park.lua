-- outbox consumer protocol 1: park.lua
-- Parks a partition key in a group behind its dead entry (docs/protocol.md, "Parked keys").
-- Parks the key unless it is parked by another dead entry and not released (a second dead
-- entry while parked changes nothing; the same dead entry again fills in its place in the
-- dead stream); a released key that meets a dead entry again (a failed redrive, a held entry
-- dying) is parked again.
-- KEYS[1]: the group's parked hash, `<prefix><topic>:{<group>}:parked`.
-- ARGV[1]: the partition key.
-- ARGV[2]: the state, JSON: {"dead_id": event id, "dead_entry": id in the dead stream or "",
-- "stream": the stream it was read from, "since_ms": Unix ms, "released": false}.
-- Returns: 1 when the state was written, 0 when the key stays parked behind another entry.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local state = cjson.decode(cur)
  if not state.released and state.dead_id ~= cjson.decode(ARGV[2]).dead_id then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
