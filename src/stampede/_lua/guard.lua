--! idempotent
-- The guarded write: each key written only if its stored envelope is older
-- (KEYS; ARGV: each write's stamp once, then its values; replies one code per key:
-- see topology/_guard.py and guard_body.lua).
-- Every key is read before any is written; a write (one stamp) that some key of
-- this call refuses writes none of its keys here. The reads, the writes without
-- expiry and the version-hash check each go to the server as one command for the
-- whole call (MGET, MSET, EXISTS), not one per key.
local n, off, K, batched = #KEYS, 0, KEYS, true
if n == 0 then return {} end
local seen, wrong, missing
if n <= 512 then seen = redis.call('MGET', unpack(KEYS))
else  -- unpack() is bounded by Lua's stack: read in slices
  seen = {}
  for s = 1, n, 512 do
    local got = redis.call('MGET', unpack(KEYS, s, math.min(n, s + 511)))
    for j = 1, #got do seen[s + j - 1] = got[j] end
  end
end
for i = 1, n do
  if not seen[i] then
    missing = missing or {}
    missing[#missing + 1] = KEYS[i]
  end
end
-- MGET answers nil for a key of another type as for a missing one: tell them apart
-- (one EXISTS for all; one per key only when some nil key exists)
if missing and redis.call('EXISTS', unpack(missing)) > 0 then
  wrong = {}
  for i = 1, n do
    if not seen[i] and redis.call('EXISTS', KEYS[i]) == 1 then wrong[i] = true end
  end
end
--! include guard_body
