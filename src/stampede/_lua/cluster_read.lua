#!lua flags=no-writes,allow-cross-slot-keys
--! idempotent
-- GET of keys of many slots on one node (keys in ARGV: no CROSSSLOT check up front).
local out = {}
for i, key in ipairs(ARGV) do out[i] = redis.call('GET', key) end
return out
