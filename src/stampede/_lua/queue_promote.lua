--! idempotent
-- promote: KEYS stream, marker hash, delayed set, retries hash, dying hash; ARGV
-- min_idle_ms, count.
-- Due is by the server's clock (`now`), the one the retry's due time was set by.
-- Move the retries that are due onto the stream. A retry whose marker names another
-- job that still exists (an enqueue replaced a marker older than the marker TTL) is
-- dropped when that job's keys hold all of its own: that job reads the group later
-- anyway; else it goes on the stream beside it (dropped, the keys only it held were
-- never repaired), the marker left on the other job. Returns {how many were added, the dead letters parked
-- by `dead` at least min_idle_ms ago (their worker died before publishing them), ids
-- and values alternating, for the caller to publish}. A younger one is its worker's
-- to publish: a resend of its `dead` call still finds it parked.
-- Run again (its reply lost, resent), it does what the next claim's call would: moves
-- the retries due since (none, or those past `count`) and lists the parked ones again,
-- whose publish is idempotent; the retries the first run moved stay on the stream.
--! include now
--! include queue_fields
--! include queue_keys
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, ARGV[2])
local added = 0
for _, group in ipairs(due) do
  local job = redis.call('HGET', KEYS[4], group)
  redis.call('ZREM', KEYS[3], group)
  redis.call('HDEL', KEYS[4], group)
  local cur = redis.call('HGET', KEYS[2], group)
  local other = cur and string.match(cur, '^(%d+%-%d+):')
  local entry = other and string.sub(other, 1, 2) ~= '0-'
    and redis.call('XRANGE', KEYS[1], other, other)[1]
  local fields = job and as_entry(job, group)
  local covered = false
  if fields and entry then
    local k, mine = field_at(entry[2], 'keys'), field_at(fields, 'keys')
    covered = mine ~= nil and k ~= nil and keys_cover(entry[2][k], fields[mine])
  end
  if fields and not covered then
    local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
    if not entry then redis.call('HSET', KEYS[2], group, id .. ':' .. now) end
    added = added + 1
  end
end
local parked, old = redis.call('HGETALL', KEYS[5]), {}
for i = 1, #parked, 2 do
  local at = tonumber(string.match(parked[i + 1], '^(%d+) '))
  if not at or now - at >= tonumber(ARGV[1]) then
    old[#old + 1] = parked[i]
    old[#old + 1] = parked[i + 1]
  end
end
return {added, old}
