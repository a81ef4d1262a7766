--! idempotent
-- The Counter's next version: INCR KEYS[1], and the counter lives as long as the
-- write it versions (ARGV[1]: that write's expiry instant in unix ms, "0": none),
-- plus ARGV[2] ms. INCR order is version order, so the newest write sets the life.
-- Resending it after a lost reply leaves a gap in the versions, never a repeat.
-- An instant plus ARGV[2] that is already past by the server's clock (a writer's
-- clock behind by more than that) sets no life: PEXPIREAT would delete the counter,
-- and the next write would count from 1 again, below the versions stored. The
-- guard refuses that write anyway (it would expire as it landed); the counter keeps
-- the life it had, or, new, lives ARGV[2] ms.
local fresh = redis.call('EXISTS', KEYS[1]) == 0
local v = redis.call('INCR', KEYS[1])
if ARGV[1] == '0' then
  redis.call('PERSIST', KEYS[1])
  return v
end
local at = tonumber(ARGV[1]) + tonumber(ARGV[2])
--! include now
if at <= now then
  if not fresh then return v end
  at = now + tonumber(ARGV[2])
end
redis.call('PEXPIREAT', KEYS[1], at)
return v
