--! fragment
-- The commit of txn_commit.lua (and of txn_commit_one.lua after its check): makes
-- each pair's version current where it is newer, keeping what it replaces. A
-- version whose expiry instant has passed is not written (reply 3): its write is
-- gone, and the older value it replaced goes too. A version at or below the hash's
-- floor `g` (see version_hash.lua), or already marked superseded here (`x:`), is
-- kept out (reply 0). What a key's version hash reads is one HMGET, of the fields
-- this commit needs (its envelope `d:` only when it brings none, its metadata `m:`
-- only when it brings no expiry instant, the format-1 marks `c` only on the rare path
-- that asks); what it writes and deletes, past the fields a commit with its own
-- envelope writes first, goes in one HSET and one HDEL at the end (`sets`, `dels`:
-- nothing reads them back before). Times are written as `stamp` (now, 13 digits: the
-- same text as the number, without converting it again for each field).
--! include now
--! include older
--! include commit_marks
--! include version_find
--! include kept_key
-- The index (version_index.lua) is read into three locals, `ixp`, `ixi` and `dirty`
-- (written back when dirty), and kept in step inline: no table, and no function that
-- captures a local, on the usual path; a hash not indexed yet is indexed through
-- version_index.lua's functions, made on that path only.
local grace = ARGV[1]  -- (ms as text: the arithmetic that needs it reads it)
local stamp = string.format('%013d', now)
local cutoff = nil  -- marks older than this are dropped: now less grace, 13 digits
local out = {}
-- `wide`, set by the includer: each pair brings six ARGV (version, token, expire-at,
-- limit, envelope, metadata: COMMIT_ONE) or three (the first three: COMMIT, whose
-- envelope and metadata were stored by its prepare, its limit checked there).
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local v, t, at, lim, env, meta
  if wide then
    local b = 1 + (i - 1) * 6
    v, t, at, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
    env, meta = ARGV[b + 5], ARGV[b + 6]
  else
    local b = 1 + (i - 1) * 3
    v, t, at, lim, env, meta = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], '0', '', ''
  end
  local s = v .. ':' .. t
  local ds = 'd:' .. s  -- (its envelope's field, named once)
  local ps = nil  -- its padded stamp (version_index.lua)
  if #v <= 20 and #t == 26 then ps = string.rep('0', 20 - #v) .. s end
  local got
  if env ~= '' then
    got = redis.call('HMGET', side, 'g', 'p', 'i', 'x:' .. s, 't')
  elseif at ~= '' then
    got = redis.call('HMGET', side, 'g', 'p', 'i', 'x:' .. s, 't', ds)
  else
    got = redis.call('HMGET', side, 'g', 'p', 'i', 'x:' .. s, 't', ds, 'm:' .. s)
  end
  local g, marked, ixp, ixi, dirty = got[1], got[4], got[2], got[3], false
  if not (ixp and ixi and #ixp % 47 == 0 and #ixi % 61 == 0) then
--! include version_index
    local ix = vindex_from(redis.call('HGETALL', side))
    ixp, ixi, dirty = ix.p, ix.i, ix.dirty
  end
  local sets, dels = {}, {}
  if env ~= '' then  -- (written now: the hash exists before its expiry is set below)
    redis.call('HSET', side, 'k', key, 'm:' .. s, stamp .. ':' .. at .. ':' .. meta)
    if ps then  -- unmarked: out of `i`, into `p` unless there
      local a = vfind(ixi, ps, 61)
      if a then ixi = string.sub(ixi, 1, a - 1) .. string.sub(ixi, a + 61) end
      if a or not vfind(ixp, ps, 47) then
        ixp = ixp .. ps
        dirty = true
      end
    end
  else
    env = got[6]
    if at == '' then
      at = got[7] and string.match(got[7], '^%d+:(%d+):') or '0'
    end
  end
  local cur = redis.pcall('GET', key)
  local curv, curt = nil, nil
  if type(cur) == 'table' and cur.err then
    out[i] = -1
    cur = false
  elseif not env then
    if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
    -- its version is gone from the hash: 2 when it is the value here (applied
    -- already: a resend), 0 when a newer one is (superseded, as when it was found
    -- marked: once its fields were collected, which of the two came first is lost,
    -- and a newer write is current either way), -5 when neither (nothing to commit)
    if curv and curv == v and curt == t then
      out[i] = 2
    elseif curv and not older(curv, curt, v, t) then
      out[i] = 0
    else
      out[i] = -5
    end
  else
--! include compare
    if g and state >= 0 then  -- superseded by a write that was no transaction's
      local gv, gt = string.match(g, '^(%d+):([0-9A-Z]+)$')
      if gv and not older(gv, gt, v, t) then state = 0 end
    end
    if state >= 0 and marked then
      -- marked superseded here already (replaced, kept out, older than a value that
      -- has since expired): completing it now would bring back what came before
      state = 0
    end
    if state == 1 and cur then  -- what it replaces is kept for the grace window
      -- (an envelope's stamp as the comparison read it; another value's read here)
      if not enveloped then cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)') end
      if cv and #ct == 26 then
        local cs = cv .. ':' .. ct
        sets[#sets + 1] = 'd:' .. cs
        sets[#sets + 1] = cur
        if #cv > 20 then  -- (no index record: a stamp too long to pad)
          redis.call('HSETNX', side, 'x:' .. cs, stamp)
        else
          local cpad = string.rep('0', 20 - #cv) .. cs
          if not vfind(ixi, cpad, 61) then  -- (a mark already there keeps its time)
            sets[#sets + 1] = 'x:' .. cs
            sets[#sets + 1] = stamp
            local a = vfind(ixp, cpad, 47)  -- marked: out of `p`, onto the end of `i`
            if a == 1 then ixp = string.sub(ixp, 48)
            elseif a then ixp = string.sub(ixp, 1, a - 1) .. string.sub(ixp, a + 47) end
            ixi = ixi .. cpad .. 'x' .. stamp
            dirty = true
          end
        end
      end
    end
    if state == 1 then
      -- the values a group write kept at this key for group reads (`<key>:stampede:p`)
      -- go: each is older than this commit, which is no write of that group, so a
      -- group read that took one as its group's last whole state would return what
      -- an acknowledged transaction replaced (deleted data back); the read reads the
      -- group torn instead (repair.md). Also where the key holds nothing now (its
      -- value evicted or expired: the kept list may outlive it). Best effort
      -- (pcall), as the guard keeps them.
      local kk = kept_key(key)
      if kk then redis.pcall('DEL', kk) end
    end
    if state == 1 and at ~= '0' and tonumber(at) <= now then
      -- its expiry instant has passed: the write is gone, and so is what it replaced
      if cur then redis.call('DEL', key) end
      sets[#sets + 1] = ds
      sets[#sets + 1] = env
      sets[#sets + 1] = 'x:' .. s
      sets[#sets + 1] = stamp
      -- and the floor rises to it, as a write that is no transaction's raises it: a
      -- transaction older than it, prepared here only after (the key held nothing
      -- newer by then), is superseded too, and never completed over it
      local gv, gt = nil, nil
      if g then gv, gt = string.match(g, '^(%d+):([0-9A-Z]+)$') end
      if not gv or older(gv, gt, v, t) then
        sets[#sets + 1] = 'g'
        sets[#sets + 1] = s
      end
      if ps and not vfind(ixi, ps, 61) then  -- marked, unless it is already
        local a = vfind(ixp, ps, 47)
        if a then ixp = string.sub(ixp, 1, a - 1) .. string.sub(ixp, a + 47) end
        ixi = ixi .. ps .. 'x' .. stamp
        dirty = true
      end
      curv, curt = v, t  -- older versions prepared here are superseded too (collected below)
      state = 3
    elseif state == 1 then
      if at ~= '0' then
        redis.call('SET', key, env, 'PXAT', at)
        local want = math.max(tonumber(at), now) + grace
        local left = redis.call('PEXPIRETIME', side)
        if left == -1 and ((got[5] and got[5] ~= t)
            or redis.call('HEXISTS', side, 'c') == 1) then
          -- the commit marks of the values before, which had no expiry, stay the
          -- sweep's evidence for as long as a sibling's prepared version waits (the
          -- prepare hold, as the writer gives it); `c`: the marks of a hash written
          -- before they moved to `t`
          want = math.max(want, now + math.max(3600000, 10 * grace))
        end
        -- a hash with no expiry keeps none while a newer version is prepared here (a
        -- prepare leaves such a hash so: it would go before that version commits)
        if (left == -1 and not vnewer(ixp, ps)) or (left >= 0 and left < want) then
          redis.call('PEXPIREAT', side, want)
        end
      else
        redis.call('SET', key, env)
        redis.call('PERSIST', side)
      end
      dels[#dels + 1] = ds  -- (no x: of it: it was not marked)
      if ps then  -- current now, its m: stays: unmarked, out of `i`, into `p` unless there
        local a = vfind(ixi, ps, 61)
        if a then ixi = string.sub(ixi, 1, a - 1) .. string.sub(ixi, a + 61) end
        if a or not vfind(ixp, ps, 47) then
          ixp = ixp .. ps
          dirty = true
        end
      end
      curv, curt = v, t
    elseif state == 0 then
      sets[#sets + 1] = ds
      sets[#sets + 1] = env
      if not marked then
        sets[#sets + 1] = 'x:' .. s
        sets[#sets + 1] = stamp
      end
      if ps and not vfind(ixi, ps, 61) then  -- marked, unless it is already
        local a = vfind(ixp, ps, 47)
        if a then ixp = string.sub(ixp, 1, a - 1) .. string.sub(ixp, a + 47) end
        ixi = ixi .. ps .. 'x' .. stamp
        dirty = true
      end
    end
    if state >= 0 then  -- the sweep's evidence
      local log = marked_decided(side, got[5], t)
      if log then
        sets[#sets + 1] = 't'
        sets[#sets + 1] = log
      end
    end
    out[i] = state
  end
  if not curv and cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
  local cpad = nil  -- (its own stamp when it is current here: padded already)
  if curv == v and curt == t then
    cpad = ps
  elseif curv and #curv <= 20 and #curt == 26 then
    cpad = string.rep('0', 20 - #curv) .. curv .. ':' .. curt
  end
--! include collect_versions
end
return out
