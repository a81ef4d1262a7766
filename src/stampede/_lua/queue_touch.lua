--! idempotent
-- touch: KEYS stream; ARGV consumer group, consumer, ids... Reset the idle time of the
-- entries `consumer` still holds (XCLAIM JUSTID keeps the delivery count), so that
-- no worker takes over a job whose worker is alive. Returns how many it touched.
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    n = n + 1
  end
end
return n
