"""The guarded-write Lua script: write a key only if the stored envelope is older.

Every data and commit write goes through it, so a delayed, repeated or racing
write can never replace a newer one and each key converges to the newest write
that reached it. Lua numbers are doubles, which cannot hold a 63-bit version, so
versions compare as decimal strings: first by length, then byte by byte; equal
versions compare by token.

One call carries the keys of many writes (the writes of one loop turn that go to
the same shard, or slot on a cluster), each key with its own stamp:

KEYS   the keys to write
ARGV   four per key: version, token, expire-at in unix ms ("0": no expiry), value
reply  one integer per key: 1 written over an older value, 2 written over the
       same stamp (an idempotent retry, or the real payload replacing a repair
       that completed this write), 0 kept because the stored write is newer,
       -1 not written because the key holds another type (WRONGTYPE)
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..errors import ShardResponseError

__all__ = [
    "CAS_SCRIPT",
    "CROSS_SLOT_GUARD_SCRIPT",
    "CROSS_SLOT_GUARD_SHA",
    "GUARD_SCRIPT",
    "GUARD_SHA",
    "KEPT",
    "SAME",
    "WRITTEN",
    "WRONGTYPE",
    "WriteItem",
    "guard_args",
    "split_codes",
]

KEPT = 0
WRITTEN = 1
SAME = 2
WRONGTYPE = -1

# The comparison, inlined in both drivers below (a Lua function would be created
# anew on every call): `keep` when the stored stamp is newer, `same` when equal.
_COMPARE = b"""
    local keep, same = false, false
    if cur then
      local cv, ct = string.match(cur, '^(%d+):([0-9A-Z]+):')
      if cv then
        if #cv ~= #v then keep = #cv > #v
        elseif cv ~= v then keep = cv > v
        elseif ct > t then keep = true
        elseif ct == t then same = true end
      end
    end
"""

_PUT = b"""
    if keep then
      out[i] = 0
    else
      if at ~= '0' then redis.call('SET', key, value, 'PXAT', at)
      else redis.call('SET', key, value) end
      if same then out[i] = 2 else out[i] = 1 end
    end
"""

GUARD_SCRIPT = (
    b"""
local out = {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 4
  local v, t, at, value = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
"""
    + _COMPARE
    + _PUT
    + b"""
  end
end
return out
"""
)

CROSS_SLOT_GUARD_SCRIPT = (
    b"#!lua flags=allow-cross-slot-keys\n"
    + b"""
local n = tonumber(ARGV[1])
local seen = {}
for i = 1, n do seen[i] = redis.call('GET', ARGV[1 + i]) end
local latest, out = {}, {}
for i = 1, n do
  local key = ARGV[1 + i]
  local cur = latest[key]
  if cur == nil then cur = seen[i] end
  local b = 1 + n + (i - 1) * 4
  local v, t, at, value = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
"""
    + _COMPARE
    + _PUT
    + b"""
  if not keep then latest[key] = value end
end
return out
"""
)
"""The guard for a whole batch on one cluster node, keys of many slots at once.

No keys are declared (they come first in ARGV, after their count), so the node
runs it without a cross-slot check; every GET is still checked, and a key the
node does not serve right now (moved, or migrating away) aborts the script
*before anything is written*: all the reads come first. A key of another type
aborts it too. The caller then falls back to one `GUARD_SCRIPT` call per slot.
A key that appears twice in a batch (two writes of one group in the same loop
turn) is compared against what the earlier item left, not the read-ahead value,
so the older of the two never lands over the newer.
"""

GUARD_SHA = hashlib.sha1(GUARD_SCRIPT).hexdigest()
CROSS_SLOT_GUARD_SHA = hashlib.sha1(CROSS_SLOT_GUARD_SCRIPT).hexdigest()


WriteItem = tuple[bytes, int, str, int | None, bytes]
"""(key, version, token, expire_at_ms, value): one key of one guarded write."""


def guard_args(items: list[WriteItem]) -> list[object]:
    """ARGV for `GUARD_SCRIPT`: four per key."""
    out: list[object] = []
    for _, version, token, at, value in items:
        out += [version, token, at or 0, value]
    return out


def split_codes(requests: list[list[WriteItem]], codes: list[int], shard: str) -> list[Any]:
    """Per request: its keys' codes, or a `ShardResponseError` for a WRONGTYPE key."""
    out: list[Any] = []
    pos = 0
    for request in requests:
        mine = [int(c) for c in codes[pos : pos + len(request)]]
        pos += len(request)
        bad = [item[0] for item, code in zip(request, mine, strict=True) if code == WRONGTYPE]
        if bad:
            out.append(
                ShardResponseError(
                    f"key {bad[0]!r} holds a non-string value (WRONGTYPE); a stamped group's "
                    "keys must be plain strings: rename or delete it",
                    shard=shard,
                )
            )
        else:
            out.append(mine)
    return out


CAS_SCRIPT = b"""
local at = ARGV[1]
local out = {}
for i, key in ipairs(KEYS) do
  local base = 1 + (i - 1) * 4
  local present, expected = ARGV[base + 1], ARGV[base + 2]
  local op, value = ARGV[base + 3], ARGV[base + 4]
  local cur = redis.call('GET', key)
  local same
  if present == '0' then same = (cur == false) else same = (cur == expected) end
  if not same then
    out[i] = 0
  elseif op == 'd' then
    redis.call('DEL', key)
    out[i] = 1
  else
    if at ~= '0' then
      redis.call('SET', key, value, 'PXAT', at)
    else
      redis.call('SET', key, value)
    end
    out[i] = 1
  end
end
return out
"""
"""Compare-and-set for repairs: change a key only if it still holds what the repair saw.

KEYS   the keys
ARGV   expire-at unix ms ("0": none), then per key: present ("1"/"0"), the value
       seen, op ("s" set / "d" delete), the new value
reply  per key: 1 changed, 0 left alone (it changed since it was seen)
"""
