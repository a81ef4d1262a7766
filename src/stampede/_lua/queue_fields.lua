--! fragment
-- Entry fields kept as JSON (a retry's, a mark's, a parked dead letter's): a flat JSON
-- array of strings, name and value alternating. Another program's value there decoded
-- to something else (or not at all) and failed the call on every run: an enqueue of
-- its group, every promotion or publish of its partition.
-- decoded(raw): the fields, or nil when `raw` is not such an array.
local function decoded(raw)
  local ok, fields = pcall(cjson.decode, raw)
  if not ok or type(fields) ~= 'table' or #fields == 0 or #fields % 2 ~= 0 then return nil end
  for i = 1, #fields do
    if type(fields[i]) ~= 'string' then return nil end
  end
  return fields
end
-- as_entry(raw, group): the fields of `raw`, or those of a malformed job of `group`
-- keeping `raw` (a worker dead-letters it, where it can be seen): never lost.
local function as_entry(raw, group)
  return decoded(raw) or {'group', group or '?', 'reason', 'malformed', 'raw', raw}
end
