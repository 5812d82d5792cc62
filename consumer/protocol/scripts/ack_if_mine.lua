-- outbox consumer protocol 1: ack_if_mine.lua
-- Acknowledges an entry if this consumer holds it (docs/protocol.md, "The dead stream"): the
-- second half of a dead letter on a Redis Cluster where the dead stream lives in another
-- slot than the entry's stream. The caller first XADDs the dead entry, then runs this, and
-- XDELs the dead entry again when this returns 0.
-- KEYS[1]: the stream the entry was read from.
-- ARGV[1]: the group. ARGV[2]: the consumer's name. ARGV[3]: the entry's stream id.
-- Returns: 1 when acknowledged, 0 when the entry is not pending for this consumer.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return 1
