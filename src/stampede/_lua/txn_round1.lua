--! idempotent
-- ROUND1  per pair: {the data key's value, the metadata of its version, the
-- server's time in unix ms (round 2 tells what changed since)}.
--! include now
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.call('GET', key)
  local meta = false
  if cur then
    local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)')
    if cv then meta = redis.call('HGET', side, 'm:' .. cv .. ':' .. ct) end
  end
  out[i] = {cur, meta, now}
end
return out
