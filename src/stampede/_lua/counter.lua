--! idempotent
-- The Counter's next version: INCR KEYS[1], and the counter lives as long as the
-- write it versions (ARGV[1]: that write's expiry instant in unix ms, "0": none),
-- plus ARGV[2] ms. INCR order is version order, so the newest write sets the life.
-- Resending it after a lost reply leaves a gap in the versions, never a repeat.
local v = redis.call('INCR', KEYS[1])
if ARGV[1] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]))
end
return v
