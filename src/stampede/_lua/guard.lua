--! idempotent
-- The guarded write: each key written only if its stored envelope is older
-- (KEYS, six ARGV per key; replies one code per key: see topology/_guard.py).
-- Every key is read before any is written; a write (one stamp) that some key of
-- this call refuses writes none of its keys here. The reads, the writes without
-- expiry and the version-hash check each go to the server as one command for the
-- whole call (MGET, MSET, EXISTS), not one per key.
local n, off, K, batched = #KEYS, 0, KEYS, true
local seen, wrong, missing = {}, {}, {}
for s = 1, n, 512 do  -- unpack() is bounded by Lua's stack: read in slices
  local got = redis.call('MGET', unpack(KEYS, s, math.min(n, s + 511)))
  for j = 1, #got do
    seen[s + j - 1] = got[j]
    if not got[j] then missing[#missing + 1] = s + j - 1 end
  end
end
-- MGET answers nil for a key of another type as for a missing one: tell them apart
-- (one EXISTS for all; one per key only when some nil key exists)
if #missing > 0 then
  local names = {}
  for j, i in ipairs(missing) do names[j] = KEYS[i] end
  if redis.call('EXISTS', unpack(names)) > 0 then
    for _, i in ipairs(missing) do
      if redis.call('EXISTS', KEYS[i]) == 1 then wrong[i] = true end
    end
  end
end
--! include guard_body
