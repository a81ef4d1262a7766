--! idempotent
-- The guarded write: each key written only if its stored envelope is older
-- (KEYS, six ARGV per key; replies one code per key: see topology/_guard.py).
-- Every key is read before any is written; a write (one stamp) that some key of
-- this call refuses writes none of its keys here. The reads, the writes without
-- expiry and the version-hash check each go to the server as one command for the
-- whole call (MGET, MSET, EXISTS), not one per key.
--! include kept_key
--! include older
--! include version_hash
--! include guard_keep
local function judge(cur, v, t, lim)
--! include compare
  return state, enveloped
end
local n = #KEYS
local seen, wrong, missing = {}, {}, {}
for s = 1, n, 512 do  -- unpack() is bounded by Lua's stack: read in slices
  local got = redis.call('MGET', unpack(KEYS, s, math.min(n, s + 511)))
  for j = 1, #got do
    seen[s + j - 1] = got[j]
    if not got[j] then missing[#missing + 1] = s + j - 1 end
  end
end
-- MGET answers nil for a key of another type as for a missing one: tell them apart
-- (one EXISTS for all; one per key only when some nil key exists)
if #missing > 0 then
  local names = {}
  for j, i in ipairs(missing) do names[j] = KEYS[i] end
  if redis.call('EXISTS', unpack(names)) > 0 then
    for _, i in ipairs(missing) do
      if redis.call('EXISTS', KEYS[i]) == 1 then wrong[i] = true end
    end
  end
end
-- Before anything is written: each key's code against what it stores now, and the
-- stamps some key refuses (WRONGTYPE, mixed kinds, future, foreign): every key of
-- a refused write is then left alone (-6), so a write is all or nothing here.
local states, kinds, refused, anyrefused = {}, {}, {}, false
for i = 1, n do
  local b = (i - 1) * 6
  local state = -1
  if not wrong[i] then
    state, kinds[i] = judge(seen[i], ARGV[b + 1], ARGV[b + 2], ARGV[b + 5])
  end
  states[i] = state
  if state < 0 then
    refused[ARGV[b + 1] .. ':' .. ARGV[b + 2]] = true
    anyrefused = true
  end
end
-- In order: a key twice in this call is compared against what the earlier write
-- left, so the older of the two never lands over the newer. Per key written (j:
-- its place in `order`): where the call's newest write there has its ARGV
-- (`last`), and the envelope that write replaces (`kept`).
local latest, out, place, order, last, kept = {}, {}, {}, {}, {}, {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 6
  local v, t = ARGV[b + 1], ARGV[b + 2]
  local state, cur, enveloped = states[i], seen[i], kinds[i]
  local prev = latest[key]
  if prev ~= nil and not wrong[i] then
    cur = prev
    state, enveloped = judge(cur, v, t, ARGV[b + 5])
  end
  if state >= 0 and anyrefused and refused[v .. ':' .. t] then state = -6 end
  if state == 1 then
    latest[key] = ARGV[b + 4]
    local j = place[key]
    if not j then
      j = #order + 1
      order[j] = key
      place[key] = j
    end
    last[j], kept[j] = b, enveloped and cur
  end
  out[i] = state
end
local plain, hashes = {}, {}
for j, key in ipairs(order) do
  local b = last[j]
  local at = ARGV[b + 3]
  keep(key, kept[j], ARGV[b + 6], at)
  if at ~= '0' then redis.call('SET', key, ARGV[b + 4], 'PXAT', at)
  else
    plain[#plain + 1] = key
    plain[#plain + 1] = ARGV[b + 4]
  end
  local vh = version_hash(key)
  if vh then hashes[#hashes + 1] = vh end
end
for s = 1, #plain, 512 do redis.call('MSET', unpack(plain, s, math.min(#plain, s + 511))) end
-- (pcall: a hash in a slot that is migrating may not be local; raise_floor then
-- looks at each, best effort as it does)
local found = #hashes > 0 and redis.pcall('EXISTS', unpack(hashes))
if found and (type(found) ~= 'number' or found > 0) then
  for j, key in ipairs(order) do raise_floor(key, ARGV[last[j] + 1], ARGV[last[j] + 2]) end
end
return out
