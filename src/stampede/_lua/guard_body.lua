--! fragment
-- The guard's decisions and writes, shared by guard.lua and guard_cross_slot.lua.
-- Expects: `n` keys `K[1..n]`, key i's six ARGV from `off + (i - 1) * 6 + 1`,
-- `seen[i]` its value (false: none) and `wrong[i]` (it holds another type), and
-- `batched`: true when the keys may share one command (not keys of many slots).
--! include kept_key
--! include older
--! include version_hash
--! include guard_keep
local function judge(cur, v, t, lim)
--! include compare
  return state, enveloped
end
-- Before anything is written: each key's code against what it stores now, and the
-- stamps some key refuses (WRONGTYPE, mixed kinds, future, foreign): every key of
-- a refused write is then left alone (-6), so a write is all or nothing here.
-- (code 9, inside this script only: written over nothing or over a value that is
-- no envelope, so nothing to keep; it replies 1)
local states, refused = {}, nil
for i = 1, n do
  local b = off + (i - 1) * 6
  local state = -1
  if not wrong[i] then
    local enveloped
    state, enveloped = judge(seen[i], ARGV[b + 1], ARGV[b + 2], ARGV[b + 5])
    if state == 1 and not enveloped then state = 9 end
  end
  states[i] = state
  if state < 0 then
    refused = refused or {}
    refused[ARGV[b + 1] .. ':' .. ARGV[b + 2]] = true
  end
end
-- In order: a key twice in this call is compared against what the earlier write
-- left, so the older of the two never lands over the newer. Per key written (j:
-- its place in `order`): where the call's newest write there has its ARGV
-- (`last`), and the envelope that write replaces (`kept`).
local out, place, order, last, kept = {}, {}, {}, {}, {}
for i = 1, n do
  local key = K[i]
  local b = off + (i - 1) * 6
  local v, t = ARGV[b + 1], ARGV[b + 2]
  local state, cur = states[i], seen[i]
  local j = place[key]
  if j and not wrong[i] then
    local enveloped
    cur = ARGV[last[j] + 4]
    state, enveloped = judge(cur, v, t, ARGV[b + 5])
    if state == 1 and not enveloped then state = 9 end
  end
  if state >= 0 and refused and refused[v .. ':' .. t] then state = -6 end
  if state == 1 or state == 9 then
    if not j then
      j = #order + 1
      order[j] = key
      place[key] = j
    end
    last[j], kept[j] = b, state == 1 and cur
    state = 1
  end
  out[i] = state
end
local plain, hashes = {}, {}
for j, key in ipairs(order) do
  local b = last[j]
  local at = ARGV[b + 3]
  keep(key, kept[j], ARGV[b + 6], at)
  if at ~= '0' then redis.call('SET', key, ARGV[b + 4], 'PXAT', at)
  elseif batched then
    plain[#plain + 1] = key
    plain[#plain + 1] = ARGV[b + 4]
  else
    redis.call('SET', key, ARGV[b + 4])
  end
  local vh = batched and version_hash(key)
  if vh then hashes[#hashes + 1] = vh end
end
for s = 1, #plain, 512 do redis.call('MSET', unpack(plain, s, math.min(#plain, s + 511))) end
-- (pcall: a hash in a slot that is migrating may not be local; raise_floor then
-- looks at each, best effort as it does). Keys of many slots (not batched) may not
-- share one EXISTS: each looks at its own hash.
local found = not batched or (#hashes > 0 and redis.pcall('EXISTS', unpack(hashes)))
if found and (type(found) ~= 'number' or found > 0) then
  for j, key in ipairs(order) do raise_floor(key, ARGV[last[j] + 1], ARGV[last[j] + 2]) end
end
return out
