--! fragment
-- The guard's decisions and writes, shared by guard.lua and guard_cross_slot.lua.
-- Expects: `n` keys `K[1..n]`, key i's six ARGV from `off + (i - 1) * 6 + 1`,
-- `seen[i]` its value (false: none) and `wrong` (nil, or wrong[i] true when key i
-- holds another type), and `batched`: true when the keys may share one command
-- (not keys of many slots).
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
local out, refused = {}, nil
for i = 1, n do
  local b = off + (i - 1) * 6
  local state = -1
  if not (wrong and wrong[i]) then
    local enveloped
    state, enveloped = judge(seen[i], ARGV[b + 1], ARGV[b + 2], ARGV[b + 5])
    if state == 1 and not enveloped then state = 9 end
  end
  out[i] = state
  if state < 0 then
    refused = refused or {}
    refused[ARGV[b + 1] .. ':' .. ARGV[b + 2]] = true
  end
end
-- A key named twice in this call (two writes merged into one call): compared, in
-- order, against what the earlier write left, so the older of the two never lands
-- over the newer. Lua strings are interned: == on two keys is one pointer test.
local twice = false
if n > 8 then
  local named = {}
  for i = 1, n do
    if named[K[i]] then twice = true break end
    named[K[i]] = true
  end
elseif n > 1 then
  for i = 2, n do
    local key = K[i]
    for h = 1, i - 1 do if K[h] == key then twice = true end end
  end
end
-- side_names(key): the key's kept list and version hash, as kept_key.lua and
-- version_hash.lua name them (nil, nil for a key with braces but no tag), from
-- one look at its braces.
local function side_names(key)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then
      local base = key .. ':stampede:'
      return base .. 'p', base .. 'v'
    end
    return nil, nil
  end
  if string.find(key, '}', 1, true) then return nil, nil end
  local base = '{' .. key .. '}:stampede:'
  return base .. 'p', base .. 'v:u'
end
-- put(key, b, cur): write key's value (its ARGV from offset b), keeping `cur`,
-- the envelope it replaces (false: none); plain values wait for one MSET, and the
-- version hash is noted for the one EXISTS below. Returns false for a key whose
-- version hash only the client can name (braces but no tag).
local plain, np, hashes, nh = {}, 0, {}, 0
local function put(key, b, cur)
  local kk, vh = side_names(key)
  local expires = ARGV[b + 3]
  if kk then keep(kk, cur, ARGV[b + 6], expires) end
  if expires ~= '0' then redis.call('SET', key, ARGV[b + 4], 'PXAT', expires)
  elseif batched then
    plain[np + 1], plain[np + 2] = key, ARGV[b + 4]
    np = np + 2
  else
    redis.call('SET', key, ARGV[b + 4])
  end
  if batched and vh then
    nh = nh + 1
    hashes[nh] = vh
  end
  return vh ~= nil
end
-- With no key twice (the usual call), each key written is put in place; else, in
-- first-seen order, `at[w]` is the offset of the call's newest write of key w in
-- ARGV and `was[w]` the envelope that write replaces.
local keys, at, newest, w = nil, nil, nil, 0
if not twice then
  for i = 1, n do
    local state = out[i]
    local b = off + (i - 1) * 6
    if state >= 0 and refused and refused[ARGV[b + 1] .. ':' .. ARGV[b + 2]] then
      state = -6
    end
    if state == 1 or state == 9 then
      state = put(K[i], b, state == 1 and seen[i]) and 1 or 10
    end
    out[i] = state
  end
else
  local place, was = {}, {}
  keys, at, newest = {}, {}, {}
  for i = 1, n do
    local key = K[i]
    local b = off + (i - 1) * 6
    local v, t = ARGV[b + 1], ARGV[b + 2]
    local state, cur = out[i], seen[i]
    local j = place[key]
    if j and not (wrong and wrong[i]) then
      local enveloped
      cur = ARGV[at[j] + 4]
      state, enveloped = judge(cur, v, t, ARGV[b + 5])
      if state == 1 and not enveloped then state = 9 end
    end
    if state >= 0 and refused and refused[v .. ':' .. t] then state = -6 end
    if state == 1 or state == 9 then
      if not j then
        w = w + 1
        j = w
        keys[j] = key
        place[key] = j
      end
      at[j], was[j], newest[j] = b, state == 1 and cur, i
      state = 1
    end
    out[i] = state
  end
  for j = 1, w do
    if not put(keys[j], at[j], was[j]) then out[newest[j]] = 10 end
  end
end
for s = 1, np, 512 do redis.call('MSET', unpack(plain, s, math.min(np, s + 511))) end
-- (pcall: a hash in a slot that is migrating may not be local; raise_floor then
-- looks at each, best effort as it does). Keys of many slots (not batched) may not
-- share one EXISTS: each looks at its own hash.
-- A written key whose hash this call cannot reach (braces but no tag, above; not
-- on this node, its slot migrating) replies 10: written, its floor left to the
-- client (topology/_floor.py), which raises it before the write returns.
local found = not batched or (nh > 0 and redis.pcall('EXISTS', unpack(hashes)))
if found and (type(found) ~= 'number' or found > 0) then
  if keys then
    for j = 1, w do
      if out[newest[j]] == 1 and not raise_floor(keys[j], ARGV[at[j] + 1], ARGV[at[j] + 2]) then
        out[newest[j]] = 10
      end
    end
  else
    for i = 1, n do
      if out[i] == 1 then
        local b = off + (i - 1) * 6
        if not raise_floor(K[i], ARGV[b + 1], ARGV[b + 2]) then out[i] = 10 end
      end
    end
  end
end
return out
