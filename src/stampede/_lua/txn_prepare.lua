--! idempotent
-- PREPARE  ARGV[1] hold ms, then per (data key, version hash) pair: version, token,
-- limit, expire-at, envelope, metadata. Stores the version without touching the
-- data key; replies per key: 1 prepared, or a refusal (-1, -2, -3, -4).
-- A version older than what the key holds now (a newer write landed first: a group
-- write or delete, whose floor could not rise in a hash that did not exist yet, or a
-- newer transaction's commit, which marks only what was prepared before it) is
-- stored marked replaced (`x:`), as its commit would mark it: once that newer value
-- is gone (a tombstone or TTL ran out), no reader or sweep may complete it here.
-- (The usual path makes no function that captures a local: the index's table API,
-- version_index.lua, is made only where a version is marked on arrival; the hold is
-- read only for a hash that has an expiry or none yet; times are written as `stamp`,
-- now as 13 digits, the same text as the number, converted once.)
--! include now
--! include version_find
local hold = nil  -- ARGV[1], read when needed
local stamp = string.format('%013d', now)
local out = {}
for i = 1, #KEYS / 2 do
--! include txn_pair
  local v, t, lim, at = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
--! include compare
    local newer = state == 0
    if state == 0 or state == 2 then state = 1 end
    if newer then
      local s = v .. ':' .. t
      local left = redis.call('PEXPIRETIME', side)
      local got = redis.call('HMGET', side, 'p', 'i', 'x:' .. s)
--! include version_index
      local m, ps = stamp .. ':' .. at .. ':' .. meta, vpad(v, t)
      if got[3] then  -- marked already: the first mark stands
        redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m)
      else
        local ix = vindex(side, got[1], got[2])
        vmarked(ix, ps, stamp, true)
        redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m, 'x:' .. s, stamp,
          'p', ix.p, 'i', ix.i)
      end
      if left ~= -1 then
        hold = hold or tonumber(ARGV[1])
        if left == -2 or left < now + hold then redis.call('PEXPIREAT', side, now + hold) end
      end
    elseif state == 1 then
      local s = v .. ':' .. t
      local left = redis.call('PEXPIRETIME', side)
      local m, ps = stamp .. ':' .. at .. ':' .. meta, nil
      if #v <= 20 and #t == 26 then ps = string.rep('0', 20 - #v) .. s end
      -- the index (version_index.lua) gains the version, unmarked, unless it holds it
      -- already (in `p`, or marked: its x: is there); a hash not indexed yet is left
      -- so (its next commit reads it whole). A new hash starts with an empty `i`.
      if left == -2 then
        redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m, 'p', ps or '', 'i', '')
      else
        local got = redis.call('HMGET', side, 'p', 'x:' .. s)
        local p = got[1]
        if ps and p and #p % 47 == 0 and not got[2] and not vfind(p, ps, 47) then
          redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m, 'p', p .. ps)
        else
          redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m)
        end
      end
      if left ~= -1 then
        hold = hold or tonumber(ARGV[1])
        if left == -2 or left < now + hold then redis.call('PEXPIREAT', side, now + hold) end
      end
    end
    out[i] = state
  end
end
return out
