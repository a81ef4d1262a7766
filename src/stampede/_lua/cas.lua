--! idempotent
-- Compare-and-set for repairs: change a key only if it still holds what was seen.
-- Replies per key: 1 changed (or already holding the new value), 0 left alone, 10
-- set, with the floor of its version hash left to the client.
--! include older
--! include version_hash
local at = ARGV[1]
local out = {}
for i, key in ipairs(KEYS) do
  local base = 1 + (i - 1) * 4
  local present, expected = ARGV[base + 1], ARGV[base + 2]
  local op, value = ARGV[base + 3], ARGV[base + 4]
  local cur = redis.call('GET', key)
  local same
  if present == '0' then same = (cur == false) else same = (cur == expected) end
  if op == 's' and cur == value then
    out[i] = 1
  elseif not same then
    out[i] = 0
  elseif op == 'd' then
    redis.call('DEL', key)
    out[i] = 1
  else
    if at ~= '0' then
      redis.call('SET', key, value, 'PXAT', at)
    else
      redis.call('SET', key, value)
    end
    out[i] = 1
    local nv, nt = string.match(value, '^(%d+):([0-9A-Z]+)')
    -- 10: set, but its version hash is out of this call's reach (topology/_floor.py)
    if nv and #nt == 26 and not raise_floor(key, nv, nt) then out[i] = 10 end
  end
end
return out
