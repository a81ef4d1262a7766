--! fragment
-- Collect a version hash `side`: drop versions marked replaced more than `grace`
-- ago, mark prepared versions older than the current one (`curv`, `curt`) as
-- replaced, keep at most the 8 newest replaced versions, and keep the marks of
-- commit decisions (`c:`) for an hour: the 64 newest, cut back to them once there
-- are more than 80 (one sort every 16 commits of a hot key, not one per commit).
  local fields = redis.call('HGETALL', side)
  local marked, kept, decided, prepared = {}, {}, {}, {}
  for j = 1, #fields, 2 do  -- by the name's first two bytes: no string made per field
    local name = fields[j]
    local head, colon = string.byte(name, 1, 2)
    if colon == 58 then
      if head == 99 then  -- c:
        if now - tonumber(fields[j + 1]) > 3600000 then redis.call('HDEL', side, name)
        else decided[#decided + 1] = name end
      elseif head == 120 then  -- x:
        local st = string.sub(name, 3)
        marked[st] = true
        if now - tonumber(fields[j + 1]) > grace then
          redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
        else
          kept[#kept + 1] = st
        end
      elseif head == 109 then  -- m:
        prepared[#prepared + 1] = name
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
  -- oldest first: each stamp parsed once into a key that sorts as the stamp does
  -- (the version right-aligned in 20 characters, then the token), sorted natively
  local function oldest_first(stamps)
    local order, by = {}, {}
    for j, st in ipairs(stamps) do
      local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
      local k = sv and (string.format('%20s', sv) .. sw) or '\1'
      order[j] = k .. '|' .. j
      by[order[j]] = st
    end
    table.sort(order)
    for j = 1, #order do order[j] = by[order[j]] end
    return order
  end
  if #decided > 80 then  -- commit decisions kept for the sweep: cut back to the 64 newest
    for j = 1, #decided do decided[j] = string.sub(decided[j], 3) end
    local old = oldest_first(decided)
    for j = 1, #old - 64 do redis.call('HDEL', side, 'c:' .. old[j]) end
  end
  if #kept > 8 then
    local old = oldest_first(kept)
    for j = 1, #old - 8 do
      local st = old[j]
      redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
    end
  end
