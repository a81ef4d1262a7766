--! idempotent
-- The guarded write: each key written only if its stored envelope is older
-- (KEYS, six ARGV per key; replies one code per key: see topology/_guard.py).
-- Every key is read before any is written; a write (one stamp) that some key of
-- this call refuses writes none of its keys here.
--! include kept_key
--! include older
--! include version_hash
local n, first = #KEYS, 0
local seen, wrong = {}, {}
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if type(cur) == 'table' and cur.err then wrong[i] = true; cur = false end
  seen[i] = cur
end
local function current(i)
  if wrong[i] then return nil end
  return seen[i]
end
--! include guard_refused
local latest, out = {}, {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 6
  local v, t, at, value, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local keep = ARGV[b + 6]
  local kk = kept_key(key)
  if wrong[i] then
    out[i] = -1
  else
    local cur = latest[key]
    if cur == nil then cur = seen[i] end
--! include compare
    if state >= 0 and refused[v .. ':' .. t] then state = -6 end
--! include guard_put
    if state == 1 then latest[key] = value end
  end
end
return out
