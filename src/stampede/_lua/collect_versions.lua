--! fragment
-- Collect a version hash `side`: drop versions marked replaced more than `grace`
-- ago, mark prepared versions older than the current one (`curv`, `curt`) as
-- replaced, keep at most the 8 newest replaced versions, and keep commit marks
-- stored as fields of their own (`c:`, see txn_marks.lua) for an hour: the 64
-- newest, cut back to them once there are more than 80.
  -- The names only (HKEYS), then the values of the marks (x:, c:) alone: never the
  -- envelopes (d:) nor the metadata (m:), which nothing here needs.
  local names = redis.call('HKEYS', side)
  local marked, kept, decided, prepared, timed = {}, {}, {}, {}, {}
  for j = 1, #names do  -- by the name's first two bytes: no string made per field
    local name = names[j]
    local head, colon = string.byte(name, 1, 2)
    if colon == 58 then
      if head == 99 or head == 120 then  -- c:, x:
        timed[#timed + 1] = name
      elseif head == 109 then  -- m:
        prepared[#prepared + 1] = name
      end
    end
  end
  for from = 1, #timed, 512 do
    local upto = math.min(from + 511, #timed)
    local values = redis.call('HMGET', side, unpack(timed, from, upto))
    for j = from, upto do
      local name, at = timed[j], tonumber(values[j - from + 1])
      if string.byte(name, 1) == 99 then  -- c:
        if now - at > 3600000 then redis.call('HDEL', side, name)
        else decided[#decided + 1] = name end
      else  -- x:
        local st = string.sub(name, 3)
        marked[st] = true
        if now - at > grace then
          redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
        else
          kept[#kept + 1] = st
        end
      end
    end
  end
  for _, name in ipairs(prepared) do
    local st = string.sub(name, 3)
    local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
    if not marked[st] and sv and curv and older(sv, sw, curv, curt) then
      redis.call('HSET', side, 'x:' .. st, now)
      kept[#kept + 1] = st
    end
  end
  -- cut(stamps, keep, drop): drop(stamp) for each but the `keep` newest, oldest
  -- first. Stamps compare as (version length, then the stamp's bytes), which orders
  -- them as the stamp does (versions have no leading zeros); what is not a stamp is
  -- oldest (in the order given). The oldest is found by a scan each time (one or two
  -- to cut, as a rule): no string is made, no sort.
  local function cut(stamps, keep, drop)
    local n = #stamps
    if n <= keep then return end
    local valid, colon = {}, {}
    for j = 1, n do
      valid[j] = string.find(stamps[j], '^%d+:[0-9A-Z]+$') ~= nil
      colon[j] = string.find(stamps[j], ':', 1, true) or 0
    end
    for _ = 1, n - keep do
      local o = nil
      for j = 1, n do
        if stamps[j] then
          if not o then
            o = j
          elseif valid[j] ~= valid[o] then
            if not valid[j] then o = j end
          elseif valid[j] and (colon[j] < colon[o]
              or (colon[j] == colon[o] and stamps[j] < stamps[o])) then
            o = j
          end
        end
      end
      drop(stamps[o])
      stamps[o] = false
    end
  end
  if #decided > 80 then  -- commit decisions kept for the sweep: cut back to the 64 newest
    for j = 1, #decided do decided[j] = string.sub(decided[j], 3) end
    cut(decided, 64, function(st) redis.call('HDEL', side, 'c:' .. st) end)
  end
  cut(kept, 8, function(st) redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st) end)
