--! fragment
-- The index of a version hash (read-atomic transactions): two fields, so that a
-- commit reads and writes two short strings where it would otherwise read the whole
-- hash (`HGETALL`: every kept envelope, and the commit marks, with it).
--   p  the versions the hash holds `m:` of and no `x:` (prepared, or made current by
--      a commit): 47 bytes each, the version zero-padded to 20 digits, ':', the token
--   i  the versions marked replaced (`x:`), in the order they were marked: 61 bytes
--      each, the padded stamp, 'x', the mark's time (unix ms, 13 digits)
-- A hash without them (or with a value of another shape there) is indexed by
-- reading it whole, once. In Lua an index is {p = ..., i = ..., dirty = bool}.
local function vpad(v, t)
  if #v > 20 or #t ~= 26 then return nil end
  return string.rep('0', 20 - #v) .. v .. ':' .. t
end
--! include version_find
local function vindex_from(fields)  -- from HGETALL's flat reply
  local marks, marked, unmarked = {}, {}, {}
  for j = 1, #fields, 2 do
    local v, t = string.match(fields[j], '^x:(%d+):([0-9A-Z]+)$')
    local pad = v and vpad(v, t)
    if pad then
      marks[#marks + 1] = string.format('%013d', tonumber(fields[j + 1]) or 0) .. pad
      marked[pad] = true
    end
  end
  for j = 1, #fields, 2 do
    local v, t = string.match(fields[j], '^m:(%d+):([0-9A-Z]+)$')
    local pad = v and vpad(v, t)
    if pad and not marked[pad] then unmarked[#unmarked + 1] = pad end
  end
  table.sort(marks)  -- by the mark's time
  for j = 1, #marks do marks[j] = string.sub(marks[j], 14) .. 'x' .. string.sub(marks[j], 1, 13) end
  return {p = table.concat(unmarked), i = table.concat(marks), dirty = #fields > 0}
end
-- vindex(side, p, i): the index from the fields' values (read with HMGET by the caller).
local function vindex(side, p, i)
  if p and i and #p % 47 == 0 and #i % 61 == 0 then return {p = p, i = i, dirty = false} end
  return vindex_from(redis.call('HGETALL', side))
end
-- the version `pad` has its m: written (or is current now): unmarked
local function vunmarked(ix, pad)
  if not pad then return end
  local at = vfind(ix.i, pad, 61)
  if at then ix.i = string.sub(ix.i, 1, at - 1) .. string.sub(ix.i, at + 61) end
  if at or not vfind(ix.p, pad, 47) then
    ix.p = ix.p .. pad
    ix.dirty = true
  end
end
-- the version `pad` was marked replaced at `stamp` (a 13-digit time), unless it was
-- already (HSETNX: the first mark stands); `fresh`: the caller knows it was not
local function vmarked(ix, pad, stamp, fresh)
  if not pad or (not fresh and vfind(ix.i, pad, 61)) then return end
  local at = vfind(ix.p, pad, 47)
  if at then ix.p = string.sub(ix.p, 1, at - 1) .. string.sub(ix.p, at + 47) end
  ix.i = ix.i .. pad .. 'x' .. stamp
  ix.dirty = true
end
