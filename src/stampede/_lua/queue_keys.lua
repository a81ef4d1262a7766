--! fragment
-- Jobs' key lists: the `keys` field, a JSON array of strings as the client wrote it
-- (ASCII). They are compared and joined literal by literal, never decoded, so a key
-- comes back byte for byte as it was written.
local function key_literals(json)
  local out, seen, i, n = {}, {}, 1, #json
  while i <= n do
    if string.sub(json, i, i) == '"' then
      local j = i + 1
      while j <= n do
        local c = string.sub(json, j, j)
        if c == '\\' then j = j + 2 elseif c == '"' then break else j = j + 1 end
      end
      local lit = string.sub(json, i, j)
      if not seen[lit] then
        seen[lit] = true
        out[#out + 1] = lit
      end
      i = j + 1
    else
      i = i + 1
    end
  end
  return out, seen
end
-- Whether key list `a` holds every key of `b`.
local function keys_cover(a, b)
  local _, have = key_literals(a)
  for _, lit in ipairs(key_literals(b)) do
    if not have[lit] then return false end
  end
  return true
end
-- The keys of `a`, then those of `b` that `a` lacks.
local function keys_union(a, b)
  local out, have = key_literals(a)
  for _, lit in ipairs(key_literals(b)) do
    if not have[lit] then out[#out + 1] = lit end
  end
  return '[' .. table.concat(out, ', ') .. ']'
end
-- The index of field `name`'s value in a flat list of entry fields, or nil.
local function field_at(fields, name)
  for i = 1, #fields - 1, 2 do
    if fields[i] == name then return i + 1 end
  end
  return nil
end
