--! fragment
-- mark_decided(side, v, t): the commit decision of transaction (v, t) reached this
-- key. The sweep's evidence (sweep.py): a prepared version elsewhere whose
-- transaction was decided is rolled forward even once every sibling has moved on.
-- The marks are one field of the version hash, `c`, a log of fixed-width records
-- (the version zero-padded to 20 digits, ':', the 26-character token, ';'), so a
-- commit appends one record and its collection reads one field, however many marks
-- the key holds. Once the log holds more than 80 records it is cut back to the 64
-- newest stamps (one sort every 16 commits of a hot key, not one per commit). A
-- value of another shape there is not stampede's log: it is started afresh.
local function mark_decided(side, v, t)
  if #v > 20 or #t ~= 26 then return end  -- not a stamp of stampede's
  local log = redis.call('HGET', side, 'c')
  if not log or #log % 48 ~= 0 then log = '' end
  log = log .. string.rep('0', 20 - #v) .. v .. ':' .. t .. ';'
  if #log > 80 * 48 then
    local records = {}
    for j = 1, #log, 48 do records[#records + 1] = string.sub(log, j, j + 47) end
    table.sort(records)  -- zero-padded: oldest stamp first
    local unique, last = {}, nil
    for j = 1, #records do
      local r = records[j]
      if r ~= last then
        unique[#unique + 1] = r
        last = r
      end
    end
    log = table.concat(unique, '', math.max(1, #unique - 63), #unique)
  end
  redis.call('HSET', side, 'c', log)
end
