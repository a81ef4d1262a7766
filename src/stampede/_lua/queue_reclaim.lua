-- reclaim: KEYS stream; ARGV consumer group, consumer, min_idle_ms, cursor, scan, want,
-- ids to leave alone... Look at up to `scan` entries of the group's pending list from
-- `cursor` (`-`, or `(<id>`: after that id) and take those idle for min_idle_ms or more
-- (XCLAIM, which counts a delivery), at most `want` of them, except the ids given (the
-- caller has them in hand already: taking them again would run one job twice). An entry whose stream entry is gone is
-- dropped from the pending list (there is no job left to repair). Returns {the next
-- cursor (`-` once the list's end was reached), {{id, fields, deliveries}, ...}}.
local want, scan, idle = tonumber(ARGV[6]), tonumber(ARGV[5]), tonumber(ARGV[3])
local skip = {}
for i = 7, #ARGV do skip[ARGV[i]] = true end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[4], '+', scan)
local out, last = {}, nil
for _, p in ipairs(pending) do
  if #out >= want then break end
  last = p[1]
  if p[3] >= idle and not skip[p[1]] then
    local got = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], p[1])
    if got[1] then
      out[#out + 1] = {p[1], got[1][2], p[4] + 1}
    else
      redis.call('XACK', KEYS[1], ARGV[1], p[1])
    end
  end
end
local cursor = '-'
if last and (#out >= want or #pending >= scan) then cursor = '(' .. last end
return {cursor, out}
