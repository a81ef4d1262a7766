"""An in-memory `Topology`, for unit tests of logic built on stampede (no server).

`MemoryTopology(shards=3)` routes keys by Redis Cluster's slots over a few
in-process "shards" (dicts) and gives the stampede operations their server-side
meaning: guarded writes compare stamps exactly as the guard script does (codes of
`stampede.GuardCode`, tombstones, kept versions for group reads, expiry), and
stampede's own scripts (kept versions, repairs' compare-and-set) run as Python.

```python
topology = MemoryTopology()
async with stampede.Stampede(topology) as st:
    await st.write("user:{7}", {"user:{7}:name": "Ada", "user:7:plan": "pro"})
```

It is a model, not a Redis: the commands it understands are the ones stampede's
reads, writes and repairs send (GET, SET, DEL, MGET, INCR, EXISTS, PTTL,
PEXPIRETIME, list commands for kept versions, SCAN, PING, and update()'s raise of
version hash floors, of which it keeps none); anything else, and any
other Lua script, is a `ShardResponseError` saying so. Integration tests belong on
real servers (`LocalPrimaries`, `LocalCluster`); this is for fast tests of the
logic around them. `TearingTopology(MemoryTopology())` tears writes, as on servers.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

from .._kept import KEPT_READ
from .._lua import Script, script
from ..errors import ConfigurationError, ShardResponseError
from ..keys import SlotMap, keyslot
from ..results import GuardCode
from ..topology._base import FixedShards, WriteOutcome
from ..topology._floor import RAISE_FLOOR
from ..topology._guard import CAS, KEEP_MS, KEPT_DEPTH, KEPT_MAX
from ..topology._node_ops import Body, Command
from ..versions import COUNTER
from ..wire import CLOCK_FLOOR

if TYPE_CHECKING:
    from ..typing import GuardStamp

__all__ = ["MemoryTopology"]

_MAX_VERSION_DIGITS = 19
_DROP = script("kept_drop")


@dataclass
class _Entry:
    value: bytes | list[bytes]
    expire_at_ms: int | None = None


def _kind(version: bytes) -> int:
    if version == b"0":
        return 0
    return 2 if int(version) >= CLOCK_FLOOR else 1


def _stamp(value: bytes) -> tuple[bytes, bytes] | bool | None:
    """(version, token) of an envelope or tombstone; None when not one; False when it
    looks like one but its version cannot be ordered (the guard's -4)."""
    head, sep, rest = value.partition(b":")
    token, sep2, _ = rest.partition(b":")
    if not sep or not head.isdigit() or len(token) != 26 or not token.isalnum():
        return None
    if not sep2 and len(value) != len(head) + 27:
        return None
    if (
        len(head) > _MAX_VERSION_DIGITS
        or int(head) >= 2**63
        or (len(head) > 1 and head[:1] == b"0")
    ):
        return False
    return head, token


def guard(current: bytes | None, version: bytes, token: bytes, limit: bytes) -> GuardCode:
    """What the guard script decides for a write of (version, token) over `current`."""
    if current is None:
        return GuardCode.WRITTEN
    stamp = _stamp(current)
    if stamp is None:
        return GuardCode.WRITTEN  # not an envelope: written over
    if stamp is False:
        return GuardCode.FOREIGN
    assert isinstance(stamp, tuple)
    cv, ct = stamp
    ck, vk = _kind(cv), _kind(version)
    if ck and vk and ck != vk:
        return GuardCode.MIXED
    if limit != b"0" and ck == 2 and int(cv) > int(limit):
        return GuardCode.FUTURE
    if (int(cv), ct) > (int(version), token):
        return GuardCode.KEPT
    if (int(cv), ct) == (int(version), token):
        return GuardCode.SAME
    return GuardCode.WRITTEN


def kept_key(key: bytes) -> bytes | None:
    """Where the guard keeps a key's replaced values (see `stampede.wire`)."""
    opened = key.find(b"{")
    if opened >= 0:
        closed = key.find(b"}", opened + 1)
        return key + b":stampede:p" if closed > opened + 1 else None
    return None if b"}" in key else b"{" + key + b"}:stampede:p:u"


class MemoryTopology(FixedShards):
    """Independent "primaries" in this process (see the module)."""

    slot_bound = False

    def __init__(self, shards: int = 3, *, slot_map: SlotMap | None = None) -> None:
        if shards < 1:
            raise ConfigurationError("MemoryTopology needs at least one shard")
        self._map = slot_map or SlotMap.even(shards)
        self._names = [f"memory-{i}" for i in range(self._map.shards)]
        self._data: list[dict[bytes, _Entry]] = [{} for _ in self._names]

    # -- where keys live ------------------------------------------------------------

    def slot_of(self, key: bytes) -> int:
        return keyslot(key)

    def shard_of(self, key: bytes) -> str:
        return self._names[self._map.shard_of(keyslot(key))]

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        return [k for k in keys if self.shard_of(k) != shard]

    # -- storage --------------------------------------------------------------------

    def _shard(self, key: bytes) -> dict[bytes, _Entry]:
        return self._data[self._map.shard_of(keyslot(key))]

    def _entry(self, key: bytes) -> _Entry | None:
        shard = self._shard(key)
        entry = shard.get(key)
        if entry is not None and entry.expire_at_ms is not None:
            if entry.expire_at_ms <= time.time_ns() // 1_000_000:
                del shard[key]
                return None
        return entry

    def _get(self, key: bytes) -> bytes | None:
        entry = self._entry(key)
        if entry is None:
            return None
        if not isinstance(entry.value, bytes):
            raise ShardResponseError(
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                shard=self.shard_of(key),
            )
        return entry.value

    def _set(self, key: bytes, value: bytes, expire_at_ms: int | None = None) -> None:
        self._shard(key)[key] = _Entry(value, expire_at_ms)

    # -- round trips ----------------------------------------------------------------

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self._get(k) for k in keys]

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        outcome = WriteOutcome()
        v, t = str(stamp["version"]).encode(), stamp["token"].encode()
        lim = str(stamp.get("limit", 0)).encode()
        expire_at_ms, keep_ms = stamp.get("expire_at_ms"), stamp.get("keep_ms", KEEP_MS)
        refusals = [self._refusal(k, v, t, lim, expire_at_ms) for k in keys]
        if any(code is not None for code in refusals):  # one write: all or nothing
            for key, code in zip(keys, refusals, strict=True):
                outcome.results[key] = int(code or GuardCode.WITHHELD)
            return outcome
        for key, value in zip(keys, values, strict=True):
            entry = self._entry(key)
            if entry is not None and not isinstance(entry.value, bytes):
                outcome.results[key] = int(GuardCode.WRONGTYPE)
                continue
            current = None if entry is None else entry.value
            assert current is None or isinstance(current, bytes)
            code = guard(current, v, t, lim)
            if code is GuardCode.WRITTEN:
                if current is not None and keep_ms and isinstance(_stamp(current), tuple):
                    self._keep(key, current, keep_ms, expire_at_ms)
                self._set(key, value, expire_at_ms or None)
            outcome.results[key] = int(code)
        return outcome

    def _refusal(
        self, key: bytes, v: bytes, t: bytes, lim: bytes, at: int | None
    ) -> GuardCode | None:
        """The guard's refusal of a write at `key` expiring at `at` (`EXPIRED`: past,
        it would vanish), or None if it may go ahead."""
        entry = self._entry(key)
        if entry is not None and not isinstance(entry.value, bytes):
            return GuardCode.WRONGTYPE
        code = guard(None if entry is None else entry.value, v, t, lim)  # type: ignore[arg-type]
        if code is GuardCode.WRITTEN and at and at <= time.time_ns() // 1_000_000:
            return GuardCode.EXPIRED
        return code if code < 0 else None

    def _keep(self, key: bytes, replaced: bytes, keep_ms: int, until: int | None) -> None:
        where = kept_key(key)
        if where is None:
            return
        kept = [replaced, *self._kept(where)]
        if len(kept) > KEPT_MAX:
            kept = kept[:KEPT_DEPTH]
        expiry = time.time_ns() // 1_000_000 + keep_ms
        self._shard(where)[where] = _Entry(kept, min(expiry, until) if until else expiry)

    def _kept(self, where: bytes | None) -> list[bytes]:
        entry = None if where is None else self._entry(where)
        return list(entry.value) if entry is not None and isinstance(entry.value, list) else []

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        return self._command(self.shard_of(key), args)

    async def execute_on(self, shard: str, *args: Any) -> Any:
        if shard not in self._names:
            raise ConfigurationError(f"no shard named {shard!r}; shards: {self._names}")
        return self._command(shard, args)

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha == KEPT_READ.sha:
            out = []
            for key in keys:
                where = kept_key(key)
                entry = None if where is None else self._entry(where)
                kept = (
                    list(entry.value) if entry is not None and isinstance(entry.value, list) else []
                )
                out.append([self._get(key), kept])
            return out
        if script.sha == _DROP.sha:
            dropped = 0
            for key in keys:
                where = kept_key(key)
                if where is not None and self._shard(where).pop(where, None) is not None:
                    dropped += 1
            return dropped
        if script.sha == CAS.sha:
            return self._cas(keys, args)
        if script.sha == COUNTER.sha:
            value = self._cmd_incr(self.shard_of(keys[0]), [keys[0]])
            at = int(args[0])
            self._shard(keys[0])[keys[0]].expire_at_ms = at + int(args[1]) if at else None
            return value
        raise ShardResponseError(
            f"the in-memory topology runs stampede's own read and repair scripts only, not "
            f"{script!r}; test scripts on real servers (stampede.testing.LocalPrimaries)",
            shard=self.shard_of(keys[0]) if keys else "memory",
        )

    def _cas(self, keys: Sequence[bytes], args: Sequence[Any]) -> list[int]:
        at = int(args[0])
        out = []
        for i, key in enumerate(keys):
            present, expected, op, value = (_b(a) for a in args[1 + 4 * i : 5 + 4 * i])
            current = self._get(key)
            same = current is None if present == b"0" else current == expected
            if op == b"s" and current == value:
                out.append(1)
            elif not same:
                out.append(0)
            elif op == b"d":
                self._shard(key).pop(key, None)
                out.append(1)
            else:
                self._set(key, value, at or None)
                out.append(1)
        return out

    async def durable_script(
        self, script: Script, keys: Sequence[bytes], args: Sequence[Any], then: list[Command]
    ) -> tuple[Any, int]:
        return await self.script(script, keys, args), 0  # no replicas in memory

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        return [self._command(self.shard_of(keys[0]), c) for c in commands]

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        async def read(*args: Any) -> Any:
            return self._command(self.shard_of(keys[0]), args)

        commands = await body(read)
        if commands is None:
            return True, []
        return True, await self.transaction(keys, commands)

    async def open(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    # -- commands -------------------------------------------------------------------

    def _command(self, shard: str, command: Sequence[Any]) -> Any:
        name = _b(command[0]).upper().decode()
        args = [_b(a) for a in command[1:]]
        handler = getattr(self, f"_cmd_{name.lower()}", None)
        if handler is None:
            raise ShardResponseError(
                f"the in-memory topology does not model {name}; test it on real servers",
                shard=shard,
            )
        return handler(shard, args)

    def _cmd_ping(self, shard: str, args: list[bytes]) -> bytes:
        return b"PONG"

    def _cmd_get(self, shard: str, args: list[bytes]) -> bytes | None:
        return self._get(args[0])

    def _cmd_mget(self, shard: str, args: list[bytes]) -> list[bytes | None]:
        return [self._get(k) for k in args]

    def _cmd_set(self, shard: str, args: list[bytes]) -> bytes | None:
        key, value, *opts = args
        words = [o.upper() for o in opts]
        at: int | None = None
        if b"PXAT" in words:
            at = int(opts[words.index(b"PXAT") + 1])
        elif b"PX" in words:
            at = time.time_ns() // 1_000_000 + int(opts[words.index(b"PX") + 1])
        old = self._get(key)
        if b"NX" in words and old is not None:
            return old if b"GET" in words else None
        self._set(key, value, at)
        return old if b"GET" in words else b"OK"

    def _cmd_del(self, shard: str, args: list[bytes]) -> int:
        return sum(self._shard(k).pop(k, None) is not None for k in args)

    def _cmd_eval(self, shard: str, args: list[bytes]) -> int:
        # update() raises each key's version hash floor in its MULTI; this model keeps
        # no version hashes (no transactions), so there is none to raise
        if args[0] == RAISE_FLOOR.source and args[1] == b"1":
            return 0
        raise ShardResponseError(
            "the in-memory topology runs no Lua but stampede's own; test it on real servers",
            shard=shard,
        )

    def _cmd_exists(self, shard: str, args: list[bytes]) -> int:
        return sum(self._entry(k) is not None for k in args)

    def _cmd_incr(self, shard: str, args: list[bytes]) -> int:
        value = int(self._get(args[0]) or b"0") + 1
        entry = self._entry(args[0])
        self._set(args[0], str(value).encode(), None if entry is None else entry.expire_at_ms)
        return value

    def _cmd_pexpiretime(self, shard: str, args: list[bytes]) -> int:
        entry = self._entry(args[0])
        if entry is None:
            return -2
        return -1 if entry.expire_at_ms is None else entry.expire_at_ms

    def _cmd_pttl(self, shard: str, args: list[bytes]) -> int:
        at = self._cmd_pexpiretime(shard, args)
        return at if at < 0 else max(0, at - time.time_ns() // 1_000_000)

    def _cmd_time(self, shard: str, args: list[bytes]) -> list[bytes]:
        seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
        return [b"%d" % seconds, b"%d" % micros]

    def _cmd_lrange(self, shard: str, args: list[bytes]) -> list[bytes]:
        entry = self._entry(args[0])
        if entry is None or not isinstance(entry.value, list):
            return []
        first, last = int(args[1]), int(args[2])
        return entry.value[first : None if last == -1 else last + 1]

    def _cmd_scan(self, shard: str, args: list[bytes]) -> list[Any]:
        words = [a.upper() for a in args]
        pattern = args[words.index(b"MATCH") + 1].decode() if b"MATCH" in words else "*"
        data = self._data[self._names.index(shard)]
        keys = [k for k in list(data) if self._entry(k) is not None]
        return [b"0", [k for k in keys if fnmatch.fnmatchcase(k.decode("latin-1"), pattern)]]


def _b(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
