--! fragment
-- Commit marks: the sweep's evidence that a transaction's commit reached a key
-- (made current, already current, kept out, or past its expiry). A version hash
-- keeps them in two logs of fixed-width records, oldest first:
--   ;<version, right-aligned in 20>:<token, 26 characters>=<unix ms, 13 digits>
-- `c` the newest, fewer than 16; once it reaches 16, they join `C`, which is cut
-- back to the 64 newest. A commit reads and rewrites the short log alone (not one
-- field per mark, which every read of the hash's names would carry, nor a log of
-- 80); so a key keeps 64 to 80 marks, the 64 newest among them, each at most an
-- hour (older ones leave at the next commit here, or with the sweep). A stamp that
-- does not fit the record (or a mark from before the logs) is a field
-- `c:<version>:<token>` of its own.
local MARK, YOUNG, KEPT = 62, 16, 64
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
  local young = redis.call('HGET', side, 'c') or ''
  if string.find(young, head, 1, true) then return end  -- resent: marked already
  young = trim_marks(young, now) .. head .. string.format('%13d', now)
  if #young < YOUNG * MARK then
    redis.call('HSET', side, 'c', young)
    return
  end
  local old = trim_marks(redis.call('HGET', side, 'C') or '', now) .. young
  if #old > KEPT * MARK then old = string.sub(old, -KEPT * MARK) end
  redis.call('HSET', side, 'C', old)
  redis.call('HDEL', side, 'c')
end
