-- outbox consumer protocol 1: read.lua
-- The fenced read of new entries (docs/protocol.md, "Reading and acknowledging under a
-- lease"): `XREADGROUP ... >` (not blocking) on the given streams whose lease this consumer
-- holds, and on the unfenced ones (a topic with one stream). A stream on which this consumer
-- still has entries pending is not read: an entry read now could overtake an older one of
-- its key, so the caller handles those first.
-- All keys must share one hash slot on a Redis Cluster (call once per slot).
-- KEYS[1..n]: the streams to read (KEYS[1] the first, ...).
-- KEYS[n+1..]: the owner keys of the fenced streams among them, each once.
-- ARGV[1]: the group. ARGV[2]: the consumer's name. ARGV[3]: COUNT for XREADGROUP.
-- ARGV[4..3+n]: per stream, in KEYS order, the 1-based index of its owner key among the owner
-- keys (stream i's owner key is KEYS[n + ARGV[3+i]]), or 0 for an unfenced stream.
-- So n = #ARGV - 3.
-- Returns one of:
--   {'e', reply}: entries; reply is XREADGROUP's (per stream: {stream, {{id, {f, v, ...}}, ...}}).
--   {'w', {stream, last id, ...}}: nothing new; each readable stream with its last entry id
--     ('0-0' when empty), the ids to block on with XREAD BLOCK before calling again.
--   {'n'}: no stream may be read (no lease held on any of them).
--   {'p', {stream, ...}}: nothing read; this consumer has entries of those streams pending.
local n = #ARGV - 3
local streams, held = {}, {}
for i = 1, n do
  local o = tonumber(ARGV[3 + i])
  if o == 0 or redis.call('GET', KEYS[n + o]) == ARGV[2] then
    if #redis.call('XPENDING', KEYS[i], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
      held[#held + 1] = KEYS[i]
    else
      streams[#streams + 1] = KEYS[i]
    end
  end
end
if #held > 0 then return {'p', held} end
if #streams == 0 then return {'n'} end
local args = {'XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS'}
for _, s in ipairs(streams) do args[#args + 1] = s end
for _ in ipairs(streams) do args[#args + 1] = '>' end
local r = redis.call(unpack(args))
if r then return {'e', r} end
local last = {}
for _, s in ipairs(streams) do
  local e = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
  last[#last + 1] = s
  last[#last + 1] = (e[1] and e[1][1]) or '0-0'
end
return {'w', last}
