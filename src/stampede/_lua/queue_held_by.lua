--! idempotent
-- held_by: KEYS stream; ARGV consumer group, consumer. How many entries the consumer
-- holds (claimed, not acked); 0 when there is no stream or group yet.
local ok, summary = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1])
if not ok then return 0 end
for _, c in ipairs(summary[4] or {}) do
  if c[1] == ARGV[2] then return tonumber(c[2]) end
end
return 0
