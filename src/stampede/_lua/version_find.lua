--! fragment
-- The index of a version hash (version_index.lua) as plain strings, by functions
-- that capture no local (cheap to make on every call):
-- vfind(s, pad, width): where `pad` starts a record of `s` (`width` bytes each), or nil
local function vfind(s, pad, width)
  local at = string.find(s, pad, 1, true)
  while at and (at - 1) % width ~= 0 do at = string.find(s, pad, at + 1, true) end
  return at
end
-- vstamp(pad): the stamp `<version>:<token>` of a padded one
local function vstamp(pad)
  return string.match(pad, '^0*(%d+:[0-9A-Z]+)$')
end
-- vnewer(p, pad): does `p` (the index's unmarked versions) hold one newer than `pad`
-- (prepared here, still to commit: the hash must outlive the hold a prepare gave it)?
local function vnewer(p, pad)
  if not pad then return false end
  for j = 1, #p, 47 do
    if string.sub(p, j, j + 46) > pad then return true end
  end
  return false
end
