--! fragment
-- keep(kk, cur, ms, at): a write that replaces envelope `cur` (false: nothing to
-- keep) keeps it for group reads that find the next write still in flight: pushed
-- onto the key's kept list `kk` (named as kept_key.lua names it), newest first,
-- which expires `ms` milliseconds after the last push, or when the new value
-- expires (unix ms `at`, '0': never) if that comes first: what a key replaced
-- never outlives what replaced it. The list is cut back to four once it holds
-- more than eight (one LTRIM every fourth push, not one per push). Best effort
-- (pcall): a slot migrating away may not hold it.
local function keep(kk, cur, ms, at)
  if not cur or ms == '0' then return end
  local len = redis.pcall('LPUSH', kk, cur)
  if type(len) ~= 'number' then return end
  if len > 8 then redis.call('LTRIM', kk, 0, 3) end
  redis.call('PEXPIRE', kk, ms)
  if at ~= '0' then redis.call('PEXPIREAT', kk, at, 'LT') end
end
