#!lua flags=allow-cross-slot-keys
--! idempotent
-- The guard for a whole batch on one cluster node, keys of many slots at once.
--! include kept_key
--! include older
--! include version_hash
--! include guard_keep
local n = tonumber(ARGV[1])
local seen = {}
for i = 1, n do seen[i] = redis.call('GET', ARGV[1 + i]) end
local first = 1 + n
local function current(i) return seen[i] end
--! include guard_refused
local latest, out = {}, {}
for i = 1, n do
  local key = ARGV[1 + i]
  local cur = latest[key]
  if cur == nil then cur = seen[i] end
  local b = 1 + n + (i - 1) * 6
  local v, t, at, value, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local keep_ms = ARGV[b + 6]
--! include compare
  if state >= 0 and refused[v .. ':' .. t] then state = -6 end
--! include guard_put
  if state == 1 then latest[key] = value end
end
return out
