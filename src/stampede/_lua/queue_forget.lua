--! idempotent
-- forget: KEYS stream; ARGV consumer group, idle_ms. Delete the group's consumers that
-- hold no pending job and were idle for idle_ms or more: workers that are gone (a live
-- one deleted so comes back with its next read, having held nothing). Returns how many.
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local n = 0
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['pending'] == 0 and tonumber(f['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    n = n + 1
  end
end
return n
