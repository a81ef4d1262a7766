--! idempotent
-- Per key: {its current value, its kept versions (newest first)}.
--! include kept_key
local out = {}
for i, key in ipairs(KEYS) do
  local kk = kept_key(key)
  local kept = {}
  if kk then kept = redis.call('LRANGE', kk, 0, -1) end
  out[i] = {redis.call('GET', key), kept}
end
return out
