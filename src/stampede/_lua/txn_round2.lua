--! idempotent
-- ROUND2  per pair, ARGV: a stamp; the envelope of exactly that version, or nil.
local out = {}
for i = 1, #KEYS / 2 do
  local key, side, s = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i]
  local cur = redis.call('GET', key)
  if cur and (cur == s or string.sub(cur, 1, #s + 1) == s .. ':') then
    out[i] = cur
  else
    out[i] = redis.call('HGET', side, 'd:' .. s)
  end
end
return out
