"""The read-atomic transaction's Lua scripts (see `layout` for the keys and fields).

Every script takes pairs of keys, a data key and its version hash, which share one
hash slot; one call carries the pairs of one shard (one slot on a cluster).

PREPARE   ARGV[1] hold ms, then per pair: version, token, limit, expire-at, envelope,
          metadata
          stores the version (d:, m:) without touching the data key; a version
          hash that did not exist lives `hold` ms unless a commit makes its
          version current (then it lives as long as the data key); replies per
          key with the guard's codes: 1 prepared, or a refusal that makes the
          writer abort (-1 WRONGTYPE, -2 mixed kinds, -3 future, -4 foreign).
COMMIT    ARGV[1] grace ms, then per pair: version, token, expire-at ("" for the
          one stored when it was prepared), limit, envelope and metadata (both ""
          when prepared before)
          makes the version current where it is newer (the guard's comparison),
          keeping the value it replaces for the grace window; collects what is
          older than that. Replies per key: 1 made current, 2 already current, 0
          kept out by a newer value, -5 the prepared version is gone, or a
          refusal code. Resending it is harmless.
COLLECT   ARGV[1] grace ms; per pair: drop what the commit would collect (the
          repair worker's sweep, for keys no longer written); replies the number
          of fields left in the last pair's hash
ROUND1    per pair: [the data key's value, the metadata of its version] (nil if none)
ROUND2    per pair ARGV: a stamp; the envelope of exactly that version, or nil
"""

from __future__ import annotations

from ..topology.guard import COMPARE_LUA
from ..topology.node_ops import Script
from ..topology.retries import idempotent_script

__all__ = ["COLLECT", "COMMIT", "PREPARE", "ROUND1", "ROUND2"]

_NOW = b"""
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
"""

# Collect a version hash: drop versions marked replaced more than `grace` ago, mark
# prepared versions older than the current one (`curv`, `curt`) as replaced, and keep
# at most the 8 newest replaced versions (a reader that needs an older one reads again).
_COLLECT = b"""
  local fields = redis.call('HGETALL', side)
  local marked, kept = {}, {}
  for j = 1, #fields, 2 do
    local name = fields[j]
    if string.sub(name, 1, 2) == 'x:' then
      local st = string.sub(name, 3)
      marked[st] = true
      if now - tonumber(fields[j + 1]) > grace then
        redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
      else
        kept[#kept + 1] = st
      end
    end
  end
  for j = 1, #fields, 2 do
    local name = fields[j]
    if string.sub(name, 1, 2) == 'm:' then
      local st = string.sub(name, 3)
      local sv, sw = string.match(st, '^(%d+):([0-9A-Z]+)$')
      if not marked[st] and sv and curv and older(sv, sw, curv, curt) then
        redis.call('HSET', side, 'x:' .. st, now)
        kept[#kept + 1] = st
      end
    end
  end
  if #kept > 8 then
    local function stamp_older(a, b)
      local av, aw = string.match(a, '^(%d+):([0-9A-Z]+)$')
      local bv, bw = string.match(b, '^(%d+):([0-9A-Z]+)$')
      return older(av, aw, bv, bw)
    end
    table.sort(kept, stamp_older)
    for j = 1, #kept - 8 do
      local st = kept[j]
      redis.call('HDEL', side, 'd:' .. st, 'm:' .. st, 'x:' .. st)
    end
  end
"""

_OLDER = b"""
local function older(av, aw, bv, bw)
  if #av ~= #bv then return #av < #bv end
  if av ~= bv then return av < bv end
  return aw < bw
end
"""

PREPARE_SOURCE = (
    _NOW
    + b"""
local hold = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local b = 1 + (i - 1) * 6
  local v, t, lim, at = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local env, meta = ARGV[b + 5], ARGV[b + 6]
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
"""
    + COMPARE_LUA
    + b"""
    if state == 0 or state == 2 then state = 1 end
    if state == 1 then
      local s = v .. ':' .. t
      local left = redis.call('PEXPIRETIME', side)
      redis.call('HSET', side, 'k', key, 'd:' .. s, env, 'm:' .. s, now .. ':' .. at .. ':' .. meta)
      if left == -2 or (left >= 0 and left < now + hold) then
        redis.call('PEXPIREAT', side, now + hold)
      end
    end
    out[i] = state
  end
end
return out
"""
)

COMMIT_SOURCE = (
    _NOW
    + _OLDER
    + b"""
local grace = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local b = 1 + (i - 1) * 6
  local v, t, at, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local env, meta = ARGV[b + 5], ARGV[b + 6]
  local s = v .. ':' .. t
  if env ~= '' then
    redis.call('HSET', side, 'k', key, 'm:' .. s, now .. ':' .. at .. ':' .. meta)
  else
    env = redis.call('HGET', side, 'd:' .. s)
    if at == '' then
      local m = redis.call('HGET', side, 'm:' .. s)
      at = m and string.match(m, '^%d+:(%d+):') or '0'
    end
  end
  local cur = redis.pcall('GET', key)
  local curv, curt = nil, nil
  if type(cur) == 'table' and cur.err then
    out[i] = -1
    cur = false
  elseif not env then
    if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
    if curv and not older(curv, curt, v, t) then out[i] = 2 else out[i] = -5 end
  else
"""
    + COMPARE_LUA
    + b"""
    if state == 1 then
      if cur then
        local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)')
        if cv and #ct == 26 then
          redis.call('HSET', side, 'd:' .. cv .. ':' .. ct, cur)
          redis.call('HSETNX', side, 'x:' .. cv .. ':' .. ct, now)
        end
      end
      if at ~= '0' then
        redis.call('SET', key, env, 'PXAT', at)
        redis.call('PEXPIREAT', side, math.max(tonumber(at), now) + grace)
      else
        redis.call('SET', key, env)
        redis.call('PERSIST', side)
      end
      redis.call('HDEL', side, 'd:' .. s, 'x:' .. s)
      curv, curt = v, t
    elseif state == 0 then
      redis.call('HSET', side, 'd:' .. s, env)
      redis.call('HSETNX', side, 'x:' .. s, now)
    end
    out[i] = state
  end
  if not curv and cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
"""
    + _COLLECT
    + b"""
end
return out
"""
)

COLLECT_SOURCE = (
    _NOW
    + _OLDER
    + b"""
local grace = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.call('GET', key)
  local curv, curt = nil, nil
  if cur then curv, curt = string.match(cur, '^(%d+):([0-9A-Z]+)') end
"""
    + _COLLECT
    + b"""
end
return redis.call('HLEN', KEYS[2])
"""
)

ROUND1_SOURCE = b"""
local out = {}
for i = 1, #KEYS / 2 do
  local key, side = KEYS[2 * i - 1], KEYS[2 * i]
  local cur = redis.call('GET', key)
  local meta = false
  if cur then
    local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+)')
    if cv then meta = redis.call('HGET', side, 'm:' .. cv .. ':' .. ct) end
  end
  out[i] = {cur, meta}
end
return out
"""

ROUND2_SOURCE = b"""
local out = {}
for i = 1, #KEYS / 2 do
  local key, side, s = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i]
  local cur = redis.call('GET', key)
  if cur and (cur == s or string.sub(cur, 1, #s + 1) == s .. ':') then
    out[i] = cur
  else
    out[i] = redis.call('HGET', side, 'd:' .. s)
  end
end
return out
"""

COLLECT = Script(COLLECT_SOURCE)
PREPARE = Script(PREPARE_SOURCE)
COMMIT = Script(COMMIT_SOURCE)
ROUND1 = Script(ROUND1_SOURCE)
ROUND2 = Script(ROUND2_SOURCE)
for _source in (PREPARE_SOURCE, COMMIT_SOURCE, COLLECT_SOURCE, ROUND1_SOURCE, ROUND2_SOURCE):
    idempotent_script(_source)  # preparing, committing or reading twice does it once
