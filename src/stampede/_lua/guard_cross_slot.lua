#!lua flags=allow-cross-slot-keys
--! idempotent
-- The guard for a whole batch on one cluster node, keys of many slots at once
-- (ARGV: the key count, the keys, then the stamps and values as guard.lua takes
-- them).
-- A GET of a key the node does not serve right now (moved, or migrating away), or
-- of a key of another type, aborts the call before anything is written; the
-- client then falls back to one guard.lua call per slot.
local n = tonumber(ARGV[1])
local off, K, batched, seen, wrong = 1 + n, {}, false, {}, nil
for i = 1, n do
  K[i] = ARGV[1 + i]
  seen[i] = redis.call('GET', K[i])
end
--! include guard_body
