--! idempotent
-- Forget the kept versions of KEYS; replies how many lists were dropped.
--! include kept_key
local n = 0
for _, key in ipairs(KEYS) do
  local kk = kept_key(key)
  if kk then n = n + redis.call('DEL', kk) end
end
return n
