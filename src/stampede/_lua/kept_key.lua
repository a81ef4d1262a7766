--! fragment
-- kept_key(key): where a key's replaced values are kept: `<key>:stampede:p` when
-- the key has a hash tag, `{<key>}:stampede:p:u` when it has no brace (not
-- `{<key>}:stampede:p`: that is the list of the key `{<key>}`); nil otherwise.
local function kept_key(key)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then return key .. ':stampede:p' end
    return nil
  end
  if string.find(key, '}', 1, true) then return nil end
  return '{' .. key .. '}:stampede:p:u'
end
