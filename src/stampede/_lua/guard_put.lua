--! fragment
-- Write the key when `state` is 1, keeping the value it replaces (see guard.lua)
-- until the grace window ends or the new value expires, whichever comes first.
    if state == 1 then
      if cur and keep ~= '0' and string.match(cur, '^%d+:[0-9A-Z]+') then
        if kk and type(redis.pcall('LPUSH', kk, cur)) == 'number' then
          redis.call('LTRIM', kk, 0, 3)
          redis.call('PEXPIRE', kk, keep)
          -- what the key replaced never outlives what replaced it
          if at ~= '0' then redis.call('PEXPIREAT', kk, at, 'LT') end
        end
      end
      if at ~= '0' then redis.call('SET', key, value, 'PXAT', at)
      else redis.call('SET', key, value) end
      raise_floor(key, v, t)
    end
    out[i] = state
