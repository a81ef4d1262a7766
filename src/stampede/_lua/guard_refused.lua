--! fragment
-- Before anything is written: `refused`, the stamps (`<version>:<token>`) of the
-- writes in this call that some key refuses (WRONGTYPE, mixed kinds, future,
-- foreign). Every key of a refused write is then left alone (code -6), so a write
-- whose keys share this call is all or nothing. `current(i)` gives key i's value,
-- or nil when the key holds another type.
local refused = {}
for i = 1, n do
  local b = first + (i - 1) * 6
  local v, t, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 5]
  local cur = current(i)
  if cur == nil then
    refused[v .. ':' .. t] = true
  else
--! include compare
    if state < 0 then refused[v .. ':' .. t] = true end
  end
end
