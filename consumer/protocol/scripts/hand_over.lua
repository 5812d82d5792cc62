-- outbox consumer protocol 1: hand_over.lua
-- The hand-over of a partition to its new owner (docs/protocol.md, "Taking a partition
-- over"): while this consumer holds the lease, takes every entry of the group still pending
-- on the stream, whoever holds it, with XAUTOCLAIM from 0-0 with no idle time and JUSTID (no
-- delivery counted), until the cursor comes back to 0-0.
-- KEYS[1]: the partition stream. KEYS[2]: its owner key, `{<stream>}:owner:<group>`.
-- ARGV[1]: the group. ARGV[2]: the consumer's name.
-- Returns: how many entries were taken (>= 0), or -1 when this consumer does not hold the
-- lease.
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
local cursor, taken = '0-0', 0
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, cursor, 'COUNT', 1000, 'JUSTID')
  cursor = r[1]
  taken = taken + #r[2]
until cursor == '0-0'
return taken
