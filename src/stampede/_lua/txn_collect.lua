--! idempotent
-- COLLECT  ARGV[1] grace ms; per pair: drop what a commit would collect (the
-- worker's sweep). Replies the number of fields left in the last pair's hash.
--! include now
--! include older
local grace = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.call('GET', key)
  local curv, curt = nil, nil
  if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
--! include collect_versions
end
return redis.call('HLEN', KEYS[2])
