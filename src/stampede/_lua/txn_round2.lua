--! idempotent
-- ROUND2  per pair, ARGV: a stamp `<version>:<token>` the read needs at that key,
-- and the server time (unix ms) when round 1 read the key. Replies per pair
-- {code, envelope}:
--   'v'  the envelope of exactly that version: the current value, or one replaced
--        since round 1 and still kept
--   'p'  that version, prepared and not yet current here (its writer is still
--        committing, or died): the reader commits it on the writer's behalf
--   'g'  gone: by version order the key is past that version and holds nothing
--        newer now (replaced, deleted, expired; a late older write that came back
--        after a tombstone ran out does not count), so it reads as missing
--   'r'  something changed since round 1 that round 2 cannot place: read again
--   'l'  lost: the key holds an older value and keeps no record of that version
--        (evicted, lost in a failover): the reader reads it as missing and says so
-- A version at or below the hash's floor `g` was superseded by a write that is no
-- transaction's (group write, delete, repair): never returned, never completed.
--! include now
--! include older
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local s, t1 = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
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
    local x = redis.call('HGET', side, 'x:' .. s)
    local g = redis.call('HGET', side, 'g')
    local floored = false
    if g then
      local gv, gt = string.match(g, '^(%d+):([0-9A-Z]+)$')
      floored = gv ~= nil and not older(gv, gt, sv, sw)
    end
    local before = x and tonumber(x) < t1  -- replaced before round 1 read the key
    if cv and older(sv, sw, cv, ct) then  -- the key moved on since round 1
      if before then out[i] = {'g', false}
      elseif floored then out[i] = {'r', false}
      elseif d and not expired then out[i] = {'v', d}
      else out[i] = {'r', false} end
    elseif floored or x then
      out[i] = {'g', false}
    elseif d then
      if expired then out[i] = {'g', false} else out[i] = {'p', d} end
    elseif not cur then
      out[i] = {'g', false}
    else
      out[i] = {'l', false}
    end
  end
end
return out
