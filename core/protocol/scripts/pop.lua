-- outbox consumer protocol 1: pop.lua
-- Removes a held entry from the front of its key's held list once it is handled (or dead
-- again), if it is still first (docs/protocol.md, "Parked keys").
-- KEYS[1]: the key's held list, `<prefix><topic>:{<group>}:held:<key>`.
-- ARGV[1]: the entry's JSON text exactly as LINDEX 0 returned it.
-- Returns: 1 when removed, 0 when the list's first element is another.
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] then redis.call('LPOP', KEYS[1]) return 1 end
return 0
