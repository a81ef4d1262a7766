--! fragment
-- Collect a version hash `side`: drop versions marked replaced more than `grace`
-- ago, mark prepared versions older than the current one (`curv`, `curt`) as
-- replaced, and keep at most the 8 newest replaced versions. (The marks of commit
-- decisions live in a hash of their own, commit_marks.lua: they are not read here.)
  local fields = redis.call('HGETALL', side)
  local marked, kept, prepared = {}, {}, {}
  for j = 1, #fields, 2 do  -- by the name's first two bytes: no string made per field
    local name = fields[j]
    local head, colon = string.byte(name, 1, 2)
    if colon == 58 then
      if head == 120 then  -- x:
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
  if curv then  -- (a marked version is passed over before its stamp is parsed)
    for _, name in ipairs(prepared) do
      local st = string.sub(name, 3)
      if not marked[st] then
        local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
        if sv and older(sv, sw, curv, curt) then
          redis.call('HSET', side, 'x:' .. st, now)
          kept[#kept + 1] = st
        end
      end
    end
  end
  if #kept > 8 then
    local old = oldest_first(kept)
    for j = 1, #old - 8 do
      local st = old[j]
      redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
    end
  end
