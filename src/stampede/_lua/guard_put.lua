--! fragment
-- Write the key when `state` is 1 (one key at a time: the cluster's cross-slot
-- guard, whose keys may not share a command), keeping the value it replaces.
    if state == 1 then
      keep(key, enveloped and cur, keep_ms, at)
      if at ~= '0' then redis.call('SET', key, value, 'PXAT', at)
      else redis.call('SET', key, value) end
      raise_floor(key, v, t)
    end
    out[i] = state
