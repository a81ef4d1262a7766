--! fragment
-- Compares the write's stamp (v, t) with the stored value `cur` (a string, or
-- false): sets `state` to the guard's code. Versions compare as decimal strings
-- (length, then bytes): Lua numbers are doubles and cannot hold 63 bits.
-- `enveloped` tells whether `cur` is an envelope (a value the guard may keep), and
-- then `cv`, `ct` are its version and token.
    local state, enveloped, cv, ct = 1, false, nil, nil
    if cur then
      -- (a version that starts with 0, which is 0 itself or has leading zeros, is
      -- matched apart: the usual one then needs no look at its first byte)
      -- (the token a ULID: 26 of Crockford's base32, the first 0-7, as a reader
      -- decodes it; a value with another token is no envelope and is written over)
      local sep
      cv, ct, sep = string.match(cur, '^([1-9]%d*):([0-7][0-9A-HJKMNP-TV-Z]+)(:?)')
      local zero = false
      if not cv then
        cv, ct, sep = string.match(cur, '^(0%d*):([0-7][0-9A-HJKMNP-TV-Z]+)(:?)')
        zero = true
      end
      if cv and #ct == 26 and (sep == ':' or #cur == #cv + 27) then
        enveloped = true
        if #cv > 19 or (#cv == 19 and cv > '9223372036854775807')
            or (zero and #cv > 1) then
          state = -4
        else
          local ck, vk = 1, 1
          if cv == '0' then ck = 0
          elseif #cv > 17 or (#cv == 17 and cv >= '72057594037927936') then ck = 2 end
          if v == '0' then vk = 0
          elseif #v > 17 or (#v == 17 and v >= '72057594037927936') then vk = 2 end
          if ck ~= 0 and vk ~= 0 and ck ~= vk then state = -2
          elseif lim ~= '0' and ck == 2 and (#cv > #lim or (#cv == #lim and cv > lim)) then
            state = -3
          elseif #cv ~= #v then if #cv > #v then state = 0 end
          elseif cv ~= v then if cv > v then state = 0 end
          elseif ct > t then state = 0
          elseif ct == t then state = 2 end
        end
      end
    end
