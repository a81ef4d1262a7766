--! fragment
-- marked_decided(recent, t): the commit marks' newest part `recent` (the version
-- hash's field `t`, or false) with the commit decision of the transaction of token
-- `t` added; nil when unchanged. The sweep's evidence (sweep.py): a prepared version
-- elsewhere whose transaction was decided is rolled forward even once every sibling
-- has moved on. The marks are the tokens of the transactions whose commit reached this
-- key, 26 bytes each (a token names one transaction), in the order they came, in two
-- fields: `t` the 16 last at most, `u` the 64 before them at most. A commit reads and
-- writes `t` alone (at most 416 bytes), except once every 16 commits, when `t` moves
-- to the end of `u`, and `u` is cut back to its 64 last. A token already in `t` is
-- not added again; a value of another shape in either field is started afresh.
local function marked_decided(side, recent, t)
  if #t ~= 26 then return nil end  -- not a stampede token
  if not recent or #recent % 26 ~= 0 then recent = '' end
  local at = string.find(recent, t, 1, true)
  while at and (at - 1) % 26 ~= 0 do at = string.find(recent, t, at + 1, true) end
  if at then return nil end
  if #recent >= 16 * 26 then
    local older = redis.call('HGET', side, 'u')
    if not older or #older % 26 ~= 0 then older = '' end
    older = older .. recent
    if #older > 64 * 26 then older = string.sub(older, #older - 64 * 26 + 1) end
    redis.call('HSET', side, 'u', older)
    recent = ''
  end
  return recent .. t
end
