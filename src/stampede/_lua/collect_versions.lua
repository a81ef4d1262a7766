--! fragment
-- Collect a version hash `side`: drop versions marked replaced more than `grace`
-- ago, mark prepared versions older than the current one (`curv`, `curt`) as
-- replaced, keep at most the 8 newest replaced versions, and keep the marks of
-- commit decisions (`c:`) for an hour, the 64 newest.
  local fields = redis.call('HGETALL', side)
  local marked, kept, decided = {}, {}, {}
  for j = 1, #fields, 2 do
    local name = fields[j]
    if string.sub(name, 1, 2) == 'c:' then
      if now - tonumber(fields[j + 1]) > 3600000 then redis.call('HDEL', side, name)
      else decided[#decided + 1] = string.sub(name, 3) end
    elseif string.sub(name, 1, 2) == 'x:' then
      local st = string.sub(name, 3)
      marked[st] = true
      if now - tonumber(fields[j + 1]) > grace then
        redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
      else
        kept[#kept + 1] = st
      end
    end
  end
  for j = 1, #fields, 2 do
    local name = fields[j]
    if string.sub(name, 1, 2) == 'm:' then
      local st = string.sub(name, 3)
      local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
      if not marked[st] and sv and curv and older(sv, sw, curv, curt) then
        redis.call('HSET', side, 'x:' .. st, now)
        kept[#kept + 1] = st
      end
    end
  end
  local function stamp_older(a, b)
    local av, aw = string.match(a, '^(%d+):([0-9A-Z]+)$')
    local bv, bw = string.match(b, '^(%d+):([0-9A-Z]+)$')
    return older(av, aw, bv, bw)
  end
  if #decided > 64 then  -- commit decisions kept for the sweep: the 64 newest, an hour
    table.sort(decided, stamp_older)
    for j = 1, #decided - 64 do redis.call('HDEL', side, 'c:' .. decided[j]) end
  end
  if #kept > 8 then
    table.sort(kept, stamp_older)
    for j = 1, #kept - 8 do
      local st = kept[j]
      redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
    end
  end
