--! idempotent
-- The guarded write: each key written only if its stored envelope is older
-- (KEYS, six ARGV per key; replies one code per key: see topology/_guard.py).
--! include kept_key
local out = {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 6
  local v, t, at, value, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local keep = ARGV[b + 6]
  local kk = kept_key(key)
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
--! include compare
--! include guard_put
  end
end
return out
