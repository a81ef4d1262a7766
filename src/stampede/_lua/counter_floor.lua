--! idempotent
-- Raise the Counter KEYS[1] to ARGV[1] (a decimal sequence version) when it is below
-- it, keeping its expiry; a missing counter stays missing (XX: the next INCR creates
-- it with its expiry). Versions compare as decimal strings: by length, then bytes.
local cur, want = redis.call('GET', KEYS[1]), ARGV[1]
if cur and (#want > #cur or (#want == #cur and want > cur)) then
  redis.call('SET', KEYS[1], want, 'XX', 'KEEPTTL')
  return 1
end
return 0
