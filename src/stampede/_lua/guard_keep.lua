--! fragment
-- In the guard's write loop, for key `key` written over envelope `cur` (false:
-- nothing to keep; a list of them, oldest first, for a key the call writes
-- twice), `tagged` the form of its name (true: a hash tag, false: no brace, nil:
-- braces but no tag, which keeps nothing), its
-- stamp's ARGV from `s` and its new value's expiry `expires`: a write that
-- replaces an envelope keeps it for group reads that find the next write still in
-- flight: pushed onto the key's kept list (named as kept_key.lua names it), newest
-- first, which expires keep (ARGV[s + 5]) milliseconds after the last push, or when
-- the new value expires (unix ms, '0': never) if that comes first: what a key
-- replaced never outlives what replaced it. The list is cut back to four once it
-- holds more than eight (one LTRIM every fourth push, not one per push). Best
-- effort (pcall): a slot migrating away may not hold it.
    local ms = ARGV[s + 5]
    if tagged ~= nil and cur and ms ~= '0' then
      local kk = tagged and key .. ':stampede:p' or '{' .. key .. '}:stampede:p:u'
      local len
      if type(cur) == 'table' then len = redis.pcall('LPUSH', kk, unpack(cur))
      else len = redis.pcall('LPUSH', kk, cur) end
      if type(len) == 'number' then
        if len > 8 then redis.call('LTRIM', kk, 0, 3) end
        redis.call('PEXPIRE', kk, ms)
        if expires ~= '0' then redis.call('PEXPIREAT', kk, expires, 'LT') end
      end
    end
