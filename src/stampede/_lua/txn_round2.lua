--! idempotent
-- ROUND2  per pair, ARGV: a stamp `<version>:<token>` the read needs at that key.
-- Replies per pair {code, envelope}:
--   'v'  the envelope of exactly that version (the current value, or one replaced
--        since round 1 and still kept); or, when the key moved past that version
--        and was later rewritten by an older late write, the current value
--   'p'  that version, prepared and not yet current here (its writer is still
--        committing, or died): the reader commits it on the writer's behalf
--   'g'  gone: the key moved past that version (replaced, deleted, or the version
--        expired) and holds nothing newer now; it reads as missing
--   'r'  the key moved past that version after round 1, and the version was
--        collected meanwhile: read again
--   'l'  lost: the key holds an older value and keeps no record of that version
--        (evicted, or lost in a failover); nothing can be trusted here
--! include now
--! include older
local out = {}
for i = 1, #KEYS / 2 do
  local key, side, s = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i]
  local sv, sw = string.match(s, '^(%d+):([0-9A-Z]+)$')
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' then cur = false end
  local cv, ct = nil, nil
  if cur then cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)') end
  if cv and cv == sv and ct == sw then
    out[i] = {'v', cur}
  else
    local d = redis.call('HGET', side, 'd:' .. s)
    local m = redis.call('HGET', side, 'm:' .. s)
    local at = m and string.match(m, '^%d+:(%d+):') or '0'
    local expired = at ~= '0' and tonumber(at) <= now
    local x = redis.call('HEXISTS', side, 'x:' .. s) == 1
    if cv and older(sv, sw, cv, ct) then
      if d and not expired then out[i] = {'v', d} else out[i] = {'r', false} end
    elseif d and not x then
      if expired then out[i] = {'g', false}
      else out[i] = {'p', d} end
    elseif not cur then
      out[i] = {'g', false}
    elseif x then
      out[i] = {'v', cur}
    else
      out[i] = {'l', false}
    end
  end
end
return out
