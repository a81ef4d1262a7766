"""The guarded-write Lua script: write a key only if the stored envelope is older.

Every data and commit write goes through it, so a delayed, repeated or racing
write can never replace a newer one and each key converges to the newest write
that reached it. Lua numbers are doubles, which cannot hold a 63-bit version, so
versions compare as decimal strings: first by length, then byte by byte; equal
versions compare by token. A tombstone (`<version>:<token>`) is compared like
any envelope, so a late older write cannot bring a deleted key back.

One call carries the keys of many writes (the writes of one loop turn that go to
the same shard, or slot on a cluster), each key with its own stamp:

KEYS   the keys to write
ARGV   six per key: version, token, expire-at in unix ms ("0": no expiry), value,
       limit (the newest clock version this writer accepts as real; "0": none),
       keep (ms to keep the value a write replaces; "0": do not keep it)
reply  one integer per key:
        1  written over an older value (or none, or a value that is no envelope)
        2  the same stamp is stored: an idempotent resend, nothing changed
        0  kept out: the stored write is newer
       -1  not written: the key holds another type (WRONGTYPE)
       -2  not written: the stored version is of the other kind (clock against
           sequence), so the two cannot be ordered
       -3  not written: the stored clock version is beyond the writer's limit
           (stamped by a clock far ahead of this writer's)
       -4  not written: the stored value looks like an envelope but its version
           cannot be ordered (2**63 or more, or leading zeros)

Kept versions: a write that replaces an envelope pushes it onto the key's kept
list, `<key>:stampede:p` for a key with a hash tag or `{<key>}:stampede:p` for one
without braces (same slot either way; a key with braces but no tag keeps none):
newest first, at most four, and the list expires `keep` ms after the last push
(best effort: a slot that is migrating away keeps nothing). A group read that
finds the newest write still in flight returns the newest whole write among the
kept versions instead of waiting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..errors import ShardResponseError

__all__ = [
    "ARGS_PER_KEY",
    "CAS_SCRIPT",
    "COMPARE_LUA",
    "CROSS_SLOT_GUARD_SCRIPT",
    "CROSS_SLOT_GUARD_SHA",
    "FOREIGN",
    "FUTURE",
    "GUARD_SCRIPT",
    "GUARD_SHA",
    "KEEP_MS",
    "KEPT",
    "KEPT_DEPTH",
    "KEPT_KEY_LUA",
    "MIXED",
    "SAME",
    "WRITTEN",
    "WRONGTYPE",
    "WriteRequest",
    "joined",
    "split_codes",
    "without_keeping",
]

KEPT = 0
WRITTEN = 1
SAME = 2
WRONGTYPE = -1
MIXED = -2
FUTURE = -3
FOREIGN = -4
ARGS_PER_KEY = 6
KEEP_MS = 5000
"""How long a replaced value is kept for group reads (`Options.version_grace`)."""
KEPT_DEPTH = 4
"""How many replaced values a key keeps."""

# The comparison, inlined in both drivers below and in the transaction commit (a Lua
# function would be created anew on every call): given `cur` (the stored value or
# false), `v`, `t` (the write's stamp) and `lim`, it sets `state`, the reply code for
# the key (1: write it).
# A version's kind: 0 for "0", 2 (clock) from 2**56 = 72057594037927936 up, else 1.
COMPARE_LUA = b"""
    local state = 1
    if cur then
      local cv, ct, sep = string.match(cur, '^(%d+):([0-9A-Z]+)(:?)')
      if cv and #ct == 26 and (sep == ':' or #cur == #cv + 27) then
        if #cv > 19 or (#cv == 19 and cv > '9223372036854775807')
            or (#cv > 1 and string.byte(cv, 1) == 48) then
          state = -4
        else
          local ck, vk = 1, 1
          if cv == '0' then ck = 0
          elseif #cv > 17 or (#cv == 17 and cv >= '72057594037927936') then ck = 2 end
          if v == '0' then vk = 0
          elseif #v > 17 or (#v == 17 and v >= '72057594037927936') then vk = 2 end
          if ck ~= 0 and vk ~= 0 and ck ~= vk then state = -2
          elseif lim ~= '0' and ck == 2 and (#cv > #lim or (#cv == #lim and cv > lim)) then
            state = -3
          elseif #cv ~= #v then if #cv > #v then state = 0 end
          elseif cv ~= v then if cv > v then state = 0 end
          elseif ct > t then state = 0
          elseif ct == t then state = 2 end
        end
      end
    end
"""

# The kept list of a key (see the module notes), or nil when none can share its slot.
KEPT_KEY_LUA = b"""
local function kept_key(key)
  local open = string.find(key, '{', 1, true)
  if open then
    local close = string.find(key, '}', open + 1, true)
    if close and close > open + 1 then return key .. ':stampede:p' end
    return nil
  end
  if string.find(key, '}', 1, true) then return nil end
  return '{' .. key .. '}:stampede:p'
end
"""

_PUT = b"""
    if state == 1 then
      if cur and keep ~= '0' and string.match(cur, '^%d+:[0-9A-Z]+') then
        if kk and type(redis.pcall('LPUSH', kk, cur)) == 'number' then
          redis.call('LTRIM', kk, 0, 3)
          redis.call('PEXPIRE', kk, keep)
        end
      end
      if at ~= '0' then redis.call('SET', key, value, 'PXAT', at)
      else redis.call('SET', key, value) end
    end
    out[i] = state
"""

GUARD_SCRIPT = (
    KEPT_KEY_LUA
    + b"""
local out = {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 6
  local v, t, at, value, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local keep = ARGV[b + 6]
  local kk = kept_key(key)
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' and cur.err then
    out[i] = -1
  else
"""
    + COMPARE_LUA
    + _PUT
    + b"""
  end
end
return out
"""
)

CROSS_SLOT_GUARD_SCRIPT = (
    b"#!lua flags=allow-cross-slot-keys\n"
    + KEPT_KEY_LUA
    + b"""
local n = tonumber(ARGV[1])
local seen = {}
for i = 1, n do seen[i] = redis.call('GET', ARGV[1 + i]) end
local latest, out = {}, {}
for i = 1, n do
  local key = ARGV[1 + i]
  local cur = latest[key]
  if cur == nil then cur = seen[i] end
  local b = 1 + n + (i - 1) * 6
  local v, t, at, value, lim = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local keep = ARGV[b + 6]
  local kk = kept_key(key)
"""
    + COMPARE_LUA
    + _PUT
    + b"""
  if state == 1 then latest[key] = value end
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


def without_keeping(command: tuple[Any, ...]) -> tuple[Any, ...]:
    """A per-slot guard call with every key's keep set to 0; any other command as is.

    A call that follows ASK runs on the node importing the slot, while the source
    may still hold the key's kept list: creating a second one there would make the
    migration's MIGRATE of the first fail with BUSYKEY. So a redirected write
    keeps nothing (keeping is best effort).
    """
    if len(command) < 3 or command[0] not in ("EVALSHA", "EVAL"):
        return command
    if command[1] not in (GUARD_SHA, GUARD_SCRIPT):
        return command
    n = int(command[2])
    head, argv = list(command[: 3 + n]), list(command[3 + n :])
    for i in range(ARGS_PER_KEY - 1, len(argv), ARGS_PER_KEY):
        argv[i] = 0
    return (*head, *argv)


CROSS_SLOT_GUARD_SHA = hashlib.sha1(CROSS_SLOT_GUARD_SCRIPT).hexdigest()


class WriteRequest:
    """The keys one guarded write sends to one shard, with their ARGV ready-made.

    `argv` holds six values per key (version, token, expire-at, value, limit, keep), in the
    order of `keys`, so a batch's call is its requests' keys and argv joined;
    `slots` are the keys' hash slots where the topology routes by them (a cluster
    splits a batch per slot when a node refuses the cross-slot script).
    """

    __slots__ = ("argv", "keys", "slots")

    def __init__(self, keys: list[bytes], argv: list[object], slots: list[int]) -> None:
        self.keys = keys
        self.argv = argv
        self.slots = slots

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def build(
        cls,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        positions: Sequence[int],
        *,
        version: int,
        token: str,
        expire_at_ms: int | None,
        limit: int = 0,
        keep_ms: int = KEEP_MS,
        slots: Sequence[int] = (),
    ) -> WriteRequest:
        """The request for `keys[p]`, `values[p]` at each position p, one stamp for all."""
        at = expire_at_ms or 0
        argv: list[object] = []
        for p in positions:
            argv += (version, token, at, values[p], limit, keep_ms)
        return cls(
            [keys[p] for p in positions], argv, [slots[p] for p in positions] if slots else []
        )


def joined(requests: Sequence[WriteRequest]) -> tuple[list[bytes], list[object], list[int]]:
    """The keys, ARGV and slots of a batch's requests, in order, as one call takes them."""
    if len(requests) == 1:
        return requests[0].keys, requests[0].argv, requests[0].slots
    return (
        [key for request in requests for key in request.keys],
        [arg for request in requests for arg in request.argv],
        [slot for request in requests for slot in request.slots],
    )


def split_codes(requests: Sequence[WriteRequest], codes: list[Any], shard: str) -> list[Any]:
    """Per request: its keys' codes, or the error of its first key that failed.

    A code is an int from the script, or an exception when the key's call failed
    (a cluster node that could not be reached for one slot); a WRONGTYPE key
    fails its request with a `ShardResponseError` naming it.
    """
    out: list[Any] = []
    pos = 0
    for request in requests:
        n = len(request.keys)
        mine = codes[pos : pos + n]
        pos += n
        error = next((c for c in mine if isinstance(c, BaseException)), None)
        if error is not None:
            out.append(error)
        elif WRONGTYPE in mine:
            bad = request.keys[mine.index(WRONGTYPE)]
            out.append(
                ShardResponseError(
                    f"key {bad!r} holds a non-string value (WRONGTYPE); a stamped group's "
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
  if op == 's' and cur == value then
    out[i] = 1
  elseif not same then
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
reply  per key: 1 changed (or already holding the new value: a resend is
       harmless), 0 left alone (it changed since it was seen)
"""
