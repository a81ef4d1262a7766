--! idempotent
-- PREPARE  ARGV[1] hold ms, then per (data key, version hash) pair: version, token,
-- limit, expire-at, envelope, metadata. Stores the version without touching the
-- data key; replies per key: 1 prepared, or a refusal (-1, -2, -3, -4).
--! include now
--! include version_index
local hold = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
--! include txn_pair
  local v, t, lim, at = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
--! include compare
    if state == 0 or state == 2 then state = 1 end
    if state == 1 then
      local s = v .. ':' .. t
      local left = redis.call('PEXPIRETIME', side)
      local m, ps = now .. ':' .. at .. ':' .. meta, vpad(v, t)
      -- the index (version_index.lua) gains the version, unmarked, unless it holds it
      -- already; a hash not indexed yet is left so (its next commit reads it whole)
      local got = left ~= -2 and redis.call('HMGET', side, 'p', 'i') or {'', ''}
      local p, ix = got[1], got[2]
      if ps and p and ix and #p % 47 == 0 and #ix % 61 == 0 then
        if not vfind(p, ps, 47) and not vfind(ix, ps, 61) then p = p .. ps end
        redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m, 'p', p, 'i', ix)
      else
        redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, m)
      end
      if left == -2 or (left >= 0 and left < now + hold) then
        redis.call('PEXPIREAT', side, now + hold)
      end
    end
    out[i] = state
  end
end
return out
