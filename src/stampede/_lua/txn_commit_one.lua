--! idempotent
-- COMMIT_ONE  the one-slot transaction: COMMIT's arguments and replies, all or
-- nothing. Every key is checked first; if any is refused (-1 WRONGTYPE, -2 mixed
-- kinds, -3 future, -4 foreign) nothing is written and every other key replies
-- -6 (not written: another key of the transaction was refused).
do
  local refused, codes = false, {}
  for i = 1, #KEYS / 2 do
--! include txn_pair
    local v, t, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 4]
    local cur = redis.pcall('GET', key)
    if type(cur) == 'table' and cur.err then
      codes[i] = -1
    else
--! include compare
      codes[i] = state
    end
    if codes[i] < 0 then refused = true end
  end
  if refused then
    for i = 1, #codes do if codes[i] >= 0 then codes[i] = -6 end end
    return codes
  end
end
local wide = true  -- (txn_commit_body.lua: six ARGV a pair, as PREPARE's)
--! include txn_commit_body
