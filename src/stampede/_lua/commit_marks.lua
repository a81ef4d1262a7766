--! fragment
-- marked_decided(log, t): the commit marks `log` (the version hash's field `t`, or
-- false) with the commit decision of the transaction of token `t` added. The sweep's
-- evidence (sweep.py): a prepared version elsewhere whose transaction was decided is
-- rolled forward even once every sibling has moved on. The log is the tokens of the
-- transactions whose commit reached this key, 26 bytes each (a token names one
-- transaction), in the order they arrived; a token already there is not added again.
-- Once it holds more than 80 it is cut back to the 64 last added (one cut every 16
-- commits of a hot key). A value of another shape there is started afresh. The
-- caller writes the log back (returned; nil: unchanged).
local function marked_decided(log, t)
  if #t ~= 26 then return nil end  -- not a stampede token
  if not log or #log % 26 ~= 0 then log = '' end
  local at = string.find(log, t, 1, true)
  while at and (at - 1) % 26 ~= 0 do at = string.find(log, t, at + 1, true) end
  if at then return nil end
  log = log .. t
  if #log > 80 * 26 then log = string.sub(log, #log - 64 * 26 + 1) end
  return log
end
