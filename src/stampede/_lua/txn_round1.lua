--! idempotent
-- ROUND1  per pair: {the data key's value, the metadata of its version, the
-- server's time in unix ms (round 2 tells what changed since)}; for a key holding
-- another type, {false, false, now, 1} (the reader refuses it by name).
--! include now
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.pcall('GET', key)
  local meta = false
  if type(cur) == 'table' then
    if cur.err and string.sub(cur.err, 1, 9) == 'WRONGTYPE' then
      out[i] = {false, false, now, 1}
    else
      return cur
    end
  else
    if cur then
      local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)')
      if cv then meta = redis.call('HGET', side, 'm:' .. cv .. ':' .. ct) end
    end
    out[i] = {cur, meta, now}
  end
end
return out
