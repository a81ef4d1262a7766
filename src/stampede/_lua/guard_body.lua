--! fragment
-- The guard's decisions and writes, shared by guard.lua and guard_cross_slot.lua.
-- Expects: `n` keys `K[1..n]`, their ARGV after `off` (the layout below),
-- `seen[i]` key i's value (false: none) and `wrong` (nil, or wrong[i] true when key
-- i holds another type), and `batched`: true when the keys may share one command
-- (not keys of many slots).
-- ARGV after `off`, one write's stamp once for all its keys: a lone write is its
-- stamp (version, token, expire-at, limit, keep) then one value per key (5 + n
-- values); a batch is, per write in order, its key count, its stamp and its keys'
-- values (6 per write + n, never 5 + n). The loops below walk it: `s` the place of
-- the key's stamp (ARGV[s + 1 .. s + 5]; in a batch ARGV[s] is its write's key
-- count), `vi` the place of its value, `left` the keys of that write still to come
-- (a count of '1' or '2', the usual ones, is known without tonumber, a costly
-- call).
-- (The common path makes no closure that captures a local, nor a table per key:
-- each costs the server allocations per call. What only a rare path needs is made
-- on that path.)
local batch = #ARGV - off ~= n + 5
-- A key named twice in this call (two writes merged into one call): compared, in
-- order, against what the earlier write left, so the older of the two never lands
-- over the newer. Lua strings are interned: == on two keys is one pointer test.
-- Only then are the places of each key's stamp and value noted (S[i], V[i]).
local twice, S, V = false, nil, nil
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
if twice then
  S, V = {}, {}
  if not batch then
    for i = 1, n do S[i], V[i] = off, off + 5 + i end
  else
    local p, i = off, 0
    while i < n do
      local c = tonumber(ARGV[p + 1])
      for j = 1, c do S[i + j], V[i + j] = p + 1, p + 6 + j end
      i, p = i + c, p + 6 + c
    end
  end
end
-- Before anything is written: each key's code against what it stores now, and the
-- stamps some key refuses (WRONGTYPE, mixed kinds, future, foreign): every key of
-- a refused write is then left alone (-6), so a write is all or nothing here.
-- (code 9, inside this script only: written over nothing or over a value that is
-- no envelope, so nothing to keep; it replies 1)
-- A key to be written whose expiry instant is not after the server's clock (`now`,
-- one TIME per call, read only when such a key has an expiry) refuses its write
-- (-7): SET ... PXAT in the past would delete the key, old value and all, and the
-- write would vanish as it landed (a writer's clock behind by more than its ttl).
local out, refused, now = {}, nil, nil
do
  local s, vi, left = off, off + 5, n
  if batch then
    s = off + 1
    vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
  end
  for i = 1, n do
    while left == 0 do  -- (a write of no keys, should one come, is passed over)
      s = vi + 1
      vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
    end
    vi, left = vi + 1, left - 1
    local code = -1
    if not (wrong and wrong[i]) then
      local cur, v, t, lim = seen[i], ARGV[s + 1], ARGV[s + 2], ARGV[s + 4]
--! include compare
      code = state
      if state == 1 and not enveloped then code = 9 end
      if state == 1 and ARGV[s + 3] ~= '0' then
        if not now then
          local tm = redis.call('TIME')
          now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
        end
        if tonumber(ARGV[s + 3]) <= now then code = -7 end
      end
    end
    out[i] = code
    if code < 0 then
      refused = refused or {}
      refused[ARGV[s + 1] .. ':' .. ARGV[s + 2]] = true
    end
  end
end
-- With no key twice (the usual call), key j of the writes below is key j of the
-- call; else, in first-seen order, `at[j]` is the place (1..n) of the call's newest
-- write of key j, `keys[j]` the key and `was[j]` the envelopes its writes replace.
local keys, at, was, w = nil, nil, nil, n
if twice then
  local function judge(cur, v, t, lim)
--! include compare
    return state, enveloped
  end
  local place = {}
  keys, at, was, w = {}, {}, {}, 0
  for i = 1, n do
    local key = K[i]
    local s = S[i]
    local v, t = ARGV[s + 1], ARGV[s + 2]
    local state, cur = out[i], seen[i]
    local j = place[key]
    if j and not (wrong and wrong[i]) then
      local enveloped
      cur = ARGV[V[at[j]]]
      state, enveloped = judge(cur, v, t, ARGV[s + 4])
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
      at[j] = i
      if state == 1 then  -- every envelope the call's writes of the key replace, in order
        local replaced = was[j]
        if replaced then replaced[#replaced + 1] = cur else was[j] = {cur} end
      end
      state = 1
    end
    out[i] = state
  end
end
-- Each key written: its value, keeping the envelope it replaces (`cur`, false: none;
-- for a key the call writes twice, the list of every envelope its writes replace,
-- the stored one first: a reader may need any of them) on its kept list, whose
-- name and the version hash's come from one look at the key's braces (as
-- kept_key.lua and version_hash.lua name them; none for a key with braces but no
-- tag), each made only when it is used. Plain values wait for one
-- MSET (one SET when there is one), the version hashes for one EXISTS below.
local plain, np, hashes, nh, h1 = nil, 0, nil, 0, nil
do
  local s, vi, left = off, off + 5, n
  if batch then
    s = off + 1
    vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
  end
  for j = 1, w do
    -- `key`: written here; `noted`: already written (a resend after a lost reply,
    -- whose first call may have left the floor to the client), only its hash noted
    local key, cur, noted = nil, false, nil
    if keys then
      local i = at[j]
      key, cur, s, vi = keys[j], was[j], S[i], V[i]
    else
      while left == 0 do
        s = vi + 1
        vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
      end
      vi, left = vi + 1, left - 1
      local state = out[j]
      if state >= 0 and refused and refused[ARGV[s + 1] .. ':' .. ARGV[s + 2]] then
        state = -6
      end
      if state == 1 or state == 9 then
        key, cur = K[j], state == 1 and seen[j]
        state = 1
      elseif state == 2 then
        noted = K[j]
      end
      out[j] = state
    end
    local named = key or noted
    if named then
      local tagged  -- true: a hash tag; false: no brace; nil: braces but no tag
      local open = string.find(named, '{', 1, true)
      if open then
        local close = string.find(named, '}', open + 1, true)
        if close and close > open + 1 then tagged = true end
      elseif not string.find(named, '}', 1, true) then
        tagged = false
      end
      if key then
        local value, expires = ARGV[vi], ARGV[s + 3]
        -- braces but no tag: only the client can name its version hash (10, below)
        if tagged == nil then out[keys and at[j] or j] = 10 end
--! include guard_keep
        if expires ~= '0' then redis.call('SET', key, value, 'PXAT', expires)
        elseif not batched then redis.call('SET', key, value)
        elseif np == 0 then plain, np = {key, value}, 2
        else
          plain[np + 1], plain[np + 2] = key, value
          np = np + 2
        end
      end
      if batched and tagged ~= nil then
        local vh = tagged and named .. ':stampede:v' or '{' .. named .. '}:stampede:v:u'
        nh = nh + 1
        if nh == 1 then h1 = vh
        elseif nh == 2 then hashes = {h1, vh}
        else hashes[nh] = vh end
      end
    end
  end
end
if np == 2 then redis.call('SET', plain[1], plain[2])
else
  for s = 1, np, 512 do redis.call('MSET', unpack(plain, s, math.min(np, s + 511))) end
end
-- Then each written key's version hash, if it has one, takes the write's stamp as
-- its floor (version_hash.lua). Keys of many slots (not batched) may not share one
-- EXISTS: each looks at its own hash. A written key whose hash this call cannot
-- reach replies 10: written, its floor left to the client (topology/_floor.py),
-- which raises it before the write returns: braces but no tag (above), or a hash
-- not on this node, its slot migrating (the EXISTS fails: pcall).
local found = not batched
if nh == 1 then found = redis.pcall('EXISTS', h1)
elseif nh > 1 then found = redis.pcall('EXISTS', unpack(hashes)) end
if found and (type(found) ~= 'number' or found > 0) then
--! include older
--! include version_hash
  local s, vi, left = off, off + 5, n
  if batch then
    s = off + 1
    vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
  end
  for j = 1, w do
    local key
    if keys then
      key, s = keys[j], S[at[j]]
    else
      while left == 0 do
        s = vi + 1
        vi, left = s + 5, ARGV[s] == '1' and 1 or ARGV[s] == '2' and 2 or tonumber(ARGV[s])
      end
      vi, left = vi + 1, left - 1
      if out[j] == 1 or out[j] == 2 then key = K[j] end
    end
    if key and not raise_floor(key, ARGV[s + 1], ARGV[s + 2]) then
      local i = keys and at[j] or j
      out[i] = out[i] == 2 and 12 or 10  -- 12: SAME, its floor left to the client
    end
  end
end
return out
