--! fragment
-- older(av, aw, bv, bw): true when stamp (av, aw) orders before (bv, bw).
local function older(av, aw, bv, bw)
  if #av ~= #bv then return #av < #bv end
  if av ~= bv then return av < bv end
  return aw < bw
end
