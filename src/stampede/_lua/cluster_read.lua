#!lua flags=no-writes,allow-cross-slot-keys
--! idempotent
-- GET of keys of many slots on one node (keys in ARGV: no CROSSSLOT check up front).
-- A key of another type reads as missing, as MGET answers it; any other error
-- (a key this node does not serve) fails the call, as before.
local out = {}
for i, key in ipairs(ARGV) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then return redis.error_reply(v.err) end
    v = false
  end
  out[i] = v
end
return out
