--! idempotent
-- pending: KEYS stream; ARGV consumer group, ids... Each entry's delivery count (0 when
-- it is not pending), read by id: a consumer's pending list may hold many more.
-- (XPENDING's detailed form, read in Lua: redis-py's reply parser expects the summary.)
local out = {}
for i = 2, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  out[#out + 1] = (#p > 0) and p[1][4] or 0
end
return out
