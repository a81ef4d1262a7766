--! fragment
-- Commit marks: the sweep's evidence that a transaction's commit reached a key
-- (made current, already current, kept out, or past its expiry). A version hash
-- keeps them in one field `c`, a log of fixed-width records, oldest first:
--   ;<version, right-aligned in 20>:<token, 26 characters>=<unix ms, 13 digits>
-- A commit reads and rewrites that one field (not one field per mark, which every
-- read of the whole hash would have to carry); a mark stays an hour, at most 80 of
-- them, cut back to the 64 newest. A stamp that does not fit the record (or a mark
-- from before the log) is a field `c:<version>:<token>` of its own.
local MARK = 62
local function trim_marks(log, now)  -- the marks less than an hour old
  if #log % MARK ~= 0 then return '' end  -- not a log of marks: start again
  local from = 1
  while from < #log and now - tonumber(string.sub(log, from + MARK - 13, from + MARK - 1))
      > 3600000 do
    from = from + MARK
  end
  return string.sub(log, from)
end
local function mark_commit(side, v, t, now)
  if #v > 20 or #t ~= 26 then
    redis.call('HSET', side, 'c:' .. v .. ':' .. t, now)
    return
  end
  local head = ';' .. string.format('%20s', v) .. ':' .. t .. '='
  local log = redis.call('HGET', side, 'c') or ''
  if string.find(log, head, 1, true) then return end  -- resent: marked already
  log = trim_marks(log, now) .. head .. string.format('%13d', now)
  if #log > 80 * MARK then log = string.sub(log, -64 * MARK) end
  redis.call('HSET', side, 'c', log)
end
