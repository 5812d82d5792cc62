-- outbox consumer protocol 1: dead_letter.lua
-- Moves an entry to the dead stream if it is still this consumer's (docs/protocol.md, "The
-- dead stream"): XADD of the dead entry and XACK of the original in one script, so two
-- consumers that both believe they hold the entry write one dead letter, not two.
-- Only when the stream and its dead stream share a hash slot (always off a cluster); on a
-- cluster across slots, see ack_if_mine.lua.
-- KEYS[1]: the stream the entry was read from. KEYS[2]: the dead stream, `<prefix><topic>:dead`.
-- ARGV[1]: the group. ARGV[2]: the consumer's name. ARGV[3]: the entry's stream id.
-- ARGV[4..]: the dead entry's fields and values, alternating: the entry's own fields in
-- order (minus any `error`, `group`, `deliveries`), then `error`, `group`, `deliveries`.
-- Returns: the dead entry's id in the dead stream (a string), or 0 (an integer) when the
-- entry is not pending for this consumer (nothing written).
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return id
