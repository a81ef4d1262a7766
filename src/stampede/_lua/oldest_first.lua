--! fragment
-- oldest_first(stamps): the stamps `<version>:<token>` sorted oldest first, with
-- anything of another shape first of all. A stamp orders as its length, then its
-- bytes (a decimal version, one colon, a 26-character token): each is padded on the
-- left to 48 bytes once and the padded strings sorted natively, with no parsing and
-- no comparison function.
local function oldest_first(stamps)
  local order, by = {}, {}
  for j, st in ipairs(stamps) do
    local n = #st
    local k
    if n > 27 and n < 48 and string.byte(st, n - 26) == 58 then
      k = string.rep('0', 48 - n) .. st
    else
      k = '\1' .. st  -- not a stamp: before every stamp
    end
    order[j] = k
    by[k] = st
  end
  table.sort(order)
  for j = 1, #order do order[j] = by[order[j]] end
  return order
end
