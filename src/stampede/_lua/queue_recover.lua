--! idempotent
-- recover: KEYS stream; ARGV consumer group, consumer, max_idle_ms, ids to leave alone...
-- The entries `consumer` holds that were delivered (or touched) no more than
-- max_idle_ms ago, except the ids given: what an XREADGROUP whose reply was lost
-- delivered to it (no other process shares a consumer name, and the caller's own
-- jobs are the ids given). Reads only. Returns {{id, fields, deliveries}, ...}; an
-- entry whose stream entry is gone is left to `reclaim`.
local skip, out = {}, {}
for i = 4, #ARGV do skip[ARGV[i]] = true end
local within = tonumber(ARGV[3])
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 10000, ARGV[2])
for _, e in ipairs(p) do
  if e[3] <= within and not skip[e[1]] then
    local got = redis.call('XRANGE', KEYS[1], e[1], e[1])[1]
    if got then out[#out + 1] = {e[1], got[2], e[4]} end
  end
end
return out
