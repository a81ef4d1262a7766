--! fragment
-- The commit of txn_commit.lua (and of txn_commit_one.lua after its check): makes
-- each pair's version current where it is newer, keeping what it replaces. A
-- version whose expiry instant has passed is not written (reply 3): its write is
-- gone, and the older value it replaced goes too. A version at or below the hash's
-- floor `g` (see version_hash.lua), or already marked superseded here (`x:`), is
-- kept out (reply 0).
--! include now
--! include older
--! include commit_marks
--! include version_index
local grace = tonumber(ARGV[1])
local stamp = string.format('%013d', now)
local out = {}
for i = 1, #KEYS / 2 do
--! include txn_pair
  local v, t, at, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local s = v .. ':' .. t
  local ps = vpad(v, t)
  local got = redis.call('HMGET', side, 'g', 'p', 'i')
  local g, ix = got[1], vindex(side, got[2], got[3])
  if env ~= '' then
    redis.call('HSET', side, 'k', key, 'm:' .. s, now .. ':' .. at .. ':' .. meta)
    vunmarked(ix, ps)
  else
    env = redis.call('HGET', side, 'd:' .. s)
    if at == '' then
      local m = redis.call('HGET', side, 'm:' .. s)
      at = m and string.match(m, '^%d+:(%d+):') or '0'
    end
  end
  local cur = redis.pcall('GET', key)
  local curv, curt = nil, nil
  if type(cur) == 'table' and cur.err then
    out[i] = -1
    cur = false
  elseif not env then
    if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
    if curv and not older(curv, curt, v, t) then out[i] = 2 else out[i] = -5 end
  else
--! include compare
    if g and state >= 0 then  -- superseded by a write that was no transaction's
      local gv, gt = string.match(g, '^(%d+):([0-9A-Z]+)$')
      if gv and not older(gv, gt, v, t) then state = 0 end
    end
    if state >= 0 and redis.call('HEXISTS', side, 'x:' .. s) == 1 then
      -- marked superseded here already (replaced, kept out, older than a value that
      -- has since expired): completing it now would bring back what came before
      state = 0
    end
    if state == 1 and cur then  -- what it replaces is kept for the grace window
      local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)')
      if cv and #ct == 26 then
        redis.call('HSET', side, 'd:' .. cv .. ':' .. ct, cur)
        redis.call('HSETNX', side, 'x:' .. cv .. ':' .. ct, now)
        vmarked(ix, vpad(cv, ct), stamp)
      end
    end
    if state == 1 and at ~= '0' and tonumber(at) <= now then
      -- its expiry instant has passed: the write is gone, and so is what it replaced
      if cur then redis.call('DEL', key) end
      redis.call('HSET', side, 'd:' .. s, env)
      redis.call('HSETNX', side, 'x:' .. s, now)
      vmarked(ix, ps, stamp)
      curv, curt = v, t  -- older versions prepared here are superseded too (collected below)
      state = 3
    elseif state == 1 then
      if at ~= '0' then
        redis.call('SET', key, env, 'PXAT', at)
        local want = math.max(tonumber(at), now) + grace
        local left = redis.call('PEXPIRETIME', side)
        if left == -1 or left < want then redis.call('PEXPIREAT', side, want) end
      else
        redis.call('SET', key, env)
        redis.call('PERSIST', side)
      end
      redis.call('HDEL', side, 'd:' .. s, 'x:' .. s)
      vunmarked(ix, ps)  -- current now: its m: stays
      curv, curt = v, t
    elseif state == 0 then
      redis.call('HSET', side, 'd:' .. s, env)
      redis.call('HSETNX', side, 'x:' .. s, now)
      vmarked(ix, ps, stamp)
    end
    if state >= 0 then mark_decided(side, v, t) end  -- the sweep's evidence
    out[i] = state
  end
  if not curv and cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
--! include collect_versions
end
return out
