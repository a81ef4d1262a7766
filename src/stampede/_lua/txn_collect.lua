--! idempotent
-- COLLECT  ARGV[1] grace ms, ARGV[2] hold ms; per pair: what the worker's sweep
-- does to a key's version hash, for keys no longer written:
--   * a version that was current and whose key is gone now (deleted, expired), a
--     prepared version older than `hold` that no commit made current (abandoned)
--     and a version at or below the floor `g` (superseded by a group write) are
--     marked replaced;
--   * what a commit would collect is collected (replaced more than `grace` ago,
--     beyond the 8 newest);
--   * a hash left with nothing a reader needs (no kept or prepared version, no
--     metadata of the key's current value) is deleted, or, while it holds commit
--     marks (the sweep's evidence), left to live `hold` at most; one
--     whose data key expires lives no longer than that instant plus `grace` (while
--     it holds commit marks: `hold` from now, if that is later).
-- Replies the number of hashes deleted.
--! include now
--! include older
--! include version_index
local grace, hold = tonumber(ARGV[1]), tonumber(ARGV[2])
local stamp = string.format('%013d', now)
local cutoff = string.format('%013d', now - grace)
local deleted = 0
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' then cur = false end
  local curv, curt = nil, nil
  if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
  local has = {}
  local raw = redis.call('HGETALL', side)
  for j = 1, #raw, 2 do has[raw[j]] = raw[j + 1] end
  local gv, gt = nil, nil
  if has['g'] then gv, gt = string.match(has['g'], '^(%d+):([0-9A-Z]+)$') end
  for name, value in pairs(has) do
    if string.sub(name, 1, 2) == 'm:' then
      local st = string.sub(name, 3)
      local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
      if not has['x:' .. st] and gv and sv and not older(gv, gt, sv, sw) then
        redis.call('HSET', side, 'x:' .. st, now)  -- superseded by a group write
      elseif not has['x:' .. st] then
        if has['d:' .. st] then
          local at = tonumber(string.match(value, '^(%d+):')) or 0
          if now - at > hold then redis.call('HSET', side, 'x:' .. st, now) end
        elseif not cur then
          redis.call('HSET', side, 'x:' .. st, now)
        end
      end
    end
  end
  local ix = vindex_from(redis.call('HGETALL', side))  -- indexed afresh
  local ixp, ixi, dirty = ix.p, ix.i, ix.dirty
  local sets, dels = {}, {}
  local cpad = curv and vpad(curv, curt)
--! include collect_versions
  local needed, inflight = false, false
  local left = redis.call('HGETALL', side)
  local kept = {}
  for j = 1, #left, 2 do kept[left[j]] = true end
  for name, _ in pairs(kept) do
    local head, st = string.sub(name, 1, 2), string.sub(name, 3)
    if head == 'd:' then
      needed = true
      if not kept['x:' .. st] then inflight = true end
    elseif head == 'm:' and curv and st == curv .. ':' .. curt then
      needed = true
    end
  end
  if not needed and (kept['t'] or kept['u'] or kept['c']) then
    -- its commit marks are the sweep's evidence for a sibling still pending (sweep.py):
    -- they stay as long as a prepared version waits there, the hold, and no longer
    local until_ = redis.call('PEXPIRETIME', side)
    if until_ == -1 or until_ > now + hold then redis.call('PEXPIREAT', side, now + hold) end
  elseif not needed then
    deleted = deleted + redis.call('DEL', side)
  elseif not inflight then
    local at = redis.call('PEXPIRETIME', key)
    if at > 0 then
      local want = math.max(at, now) + grace
      if kept['t'] or kept['u'] or kept['c'] then
        -- its commit marks too outlive the value, for the hold: a sibling still
        -- pending that this sweep's first pass did not see (its slot moved to a node
        -- already walked, or its transaction came after the walk) needs them once
        -- the value is gone, to be completed there and not left at what it replaced
        want = math.max(want, now + hold)
      end
      local until_ = redis.call('PEXPIRETIME', side)
      if until_ == -1 or until_ > want then redis.call('PEXPIREAT', side, want) end
    end
  end
end
return deleted
