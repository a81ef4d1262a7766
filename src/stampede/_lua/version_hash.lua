--! fragment
-- version_hash(key): the key's version hash (read-atomic transactions) in its two
-- simple forms, `<key>:stampede:v` with a hash tag and `{<key>}:stampede:v:u` with
-- no brace; nil for a key with braces but no tag (its hash is named by the client).
local function version_hash(key)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then return key .. ':stampede:v' end
    return nil
  end
  if string.find(key, '}', 1, true) then return nil end
  return '{' .. key .. '}:stampede:v:u'
end
-- floor_at(vh, v, t): version hash `vh` exists; its floor `g` rises to stamp (v, t)
-- (a write that is no transaction's made that stamp current at its key), so that a
-- transaction prepared there at or below it is known to be superseded even once the
-- value that superseded it is gone (a tombstone expired): no reader or sweep may
-- complete it there.
-- Returns false, changing nothing, when `vh` holds another type (another program's
-- value at stampede's name): an error here would stop a guard call half way, after
-- its writes, and fail them all; the client raises the floor itself, and fails.
local function floor_at(vh, v, t)
  local g = redis.pcall('HGET', vh, 'g')
  if type(g) == 'table' then return false end
  local gv, gt = nil, nil
  if g then gv, gt = string.match(g, '^(%d+):([0-9A-Z]+)$') end
  if not gv or older(gv, gt, v, t) then redis.call('HSET', vh, 'g', v .. ':' .. t) end
  return true
end
-- raise_floor(key, v, t): the same for the data key `key`, if it has a version hash.
-- Returns false when this call cannot reach the hash: the key has braces but no tag
-- (only the client can name its hash), the hash is not on this node (its slot is
-- migrating), or it holds another type; the guard then leaves the floor to the client
-- (topology/_floor.py).
local function raise_floor(key, v, t)
  local vh = version_hash(key)
  if not vh then return false end
  -- pcall: in a slot that is migrating, the hash may be on the other node
  local exists = redis.pcall('EXISTS', vh)
  if type(exists) ~= 'number' then return false end
  if exists == 1 then return floor_at(vh, v, t) end
  return true
end
