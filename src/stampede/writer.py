"""Plan and run a logical write: stamp every value, write through the guard, record last.

A write covers every key of its group. When all of them (and, in commit mode, the
commit record) share one hash slot, the whole write is one guarded Lua call: the
server applies it atomically. Otherwise each shard gets its keys in one call, all
shards at once, and in commit mode the record is written only after every data
key was acknowledged.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from .envelope import Envelope
from .errors import (
    CrossSlotError,
    PartialWriteError,
    ShardTimeout,
    WriteConflict,
    WriteTimeout,
)
from .keys import to_bytes
from .results import Receipt
from .topology.base import Topology, WriteOutcome
from .topology.guard import KEPT
from .verdict import Mode, commit_key
from .versions import VersionSource

__all__ = [
    "as_payload",
    "commit_payload",
    "expire_at",
    "new_token",
    "require_one_slot",
    "update_group",
    "write_group",
]

K = TypeVar("K", bytes, str)
UpdateFn = Callable[
    [dict[K, bytes | None]], Mapping[K, bytes | str] | Awaitable[Mapping[K, bytes | str]]
]


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # every 10-bit value, 2 chars
_head: tuple[int, str] = (-1, "")


def new_token() -> str:
    """A fresh ULID token for one logical write: 48-bit milliseconds, 80 random bits.

    The same 26 characters `str(ulid.ULID())` gives, made about three times faster
    (it is on every write's path): the time part is encoded once per millisecond
    and the random part ten bits at a time.
    """
    global _head
    ms = time.time_ns() // 1_000_000
    if _head[0] != ms:
        p = _PAIRS
        _head = (
            ms,
            p[ms >> 40 & 1023] + p[ms >> 30 & 1023] + p[ms >> 20 & 1023] + p[ms >> 10 & 1023]
            + p[ms & 1023],
        )  # fmt: skip
    r = int.from_bytes(os.urandom(10))
    p = _PAIRS
    return (
        _head[1] + p[r >> 70] + p[r >> 60 & 1023] + p[r >> 50 & 1023] + p[r >> 40 & 1023]
        + p[r >> 30 & 1023] + p[r >> 20 & 1023] + p[r >> 10 & 1023] + p[r & 1023]
    )  # fmt: skip


def commit_payload(keys: Sequence[bytes]) -> bytes:
    """The commit record's payload: the JSON list of the keys the write covered."""
    return json.dumps([k.decode("utf-8", "surrogateescape") for k in keys]).encode()


def as_payload(key: bytes, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(
        f"value for key {key!r} must be bytes or str, got {type(value).__name__}; "
        "serialise it first (or use stampede.TypedGroup for pydantic models)"
    )


def expire_at(ttl: float | None) -> int | None:
    """One absolute expiry (unix ms) for every key of a write, so they expire together."""
    return None if ttl is None else time.time_ns() // 1_000_000 + max(1, round(ttl * 1000))


async def write_group(
    topology: Topology,
    group: bytes,
    keys: Sequence[bytes],
    payloads: Sequence[bytes],
    *,
    mode: Mode,
    versions: VersionSource,
    ttl: float | None,
    stamp: tuple[int, str] | None = None,
) -> Receipt:
    """Stamp and write every key of a group; raise `PartialWriteError` if a shard failed.

    `stamp` fixes (version, token) instead of drawing them (repairs do this).
    """
    if stamp is None:
        version, token = await versions.next_version(group, topology), new_token()
    else:
        version, token = stamp
    at = expire_at(ttl)
    head = b"%d:%s:" % (version, token.encode())
    encoded = [head + p for p in payloads]  # Envelope(version, token, p).encode()
    slots = {topology.slot_of(k) for k in keys}
    if mode is Mode.STAMP:
        atomic = len(slots) == 1
        outcome = await topology.write_guarded(
            keys, encoded, version=version, token=token, expire_at_ms=at
        )
        _raise_for(group, outcome)
    else:
        record = head + commit_payload(keys)
        ckey = commit_key(group)
        atomic = len(slots) == 1 and topology.slot_of(ckey) in slots
        if atomic:
            outcome = await topology.write_guarded(
                [*keys, ckey], [*encoded, record], version=version, token=token, expire_at_ms=at
            )
            _raise_for(group, outcome)
        else:
            outcome = await topology.write_guarded(
                keys, encoded, version=version, token=token, expire_at_ms=at
            )
            _raise_for(group, outcome)
            done = await topology.write_guarded(
                [ckey], [record], version=version, token=token, expire_at_ms=at
            )
            _raise_for(group, done, landed=keys)
    superseded = tuple(k for k in keys if outcome.results.get(k) == KEPT)
    return Receipt(group, version, token, tuple(keys), mode, atomic, superseded)


def _raise_for(group: bytes, outcome: WriteOutcome, landed: Sequence[bytes] = ()) -> None:
    error = outcome.first_error()
    if error is None:
        return
    cls = WriteTimeout if isinstance(error, ShardTimeout) else PartialWriteError
    raise cls(
        group.decode("utf-8", "backslashreplace"),
        landed=[*landed, *outcome.results],
        failed=list(outcome.failed),
        cause=error,
    ) from error


def require_one_slot(topology: Topology, keys: Sequence[bytes], operation: str) -> None:
    """`CrossSlotError` naming the keys and their slots unless they share one slot."""
    slots = {k: topology.slot_of(k) for k in keys}
    if len(set(slots.values())) > 1:
        raise CrossSlotError(slots, operation=operation)


async def update_group(
    topology: Topology,
    group: bytes,
    names: Sequence[K],
    fn: UpdateFn[K],
    *,
    mode: Mode,
    versions: VersionSource,
    ttl: float | None,
    max_attempts: int,
) -> Receipt:
    """Optimistic read-modify-write of a co-located group with WATCH / MULTI / EXEC.

    `fn` gets the current payloads (None for a missing key) and returns the new
    payload of every key. The new version is newer than both the version source's
    and the stored one, so the guard of a later stamped write still orders it.
    """
    keys: list[bytes] = [to_bytes(n) for n in names]
    watched: list[bytes] = [*keys, commit_key(group)] if mode is Mode.COMMIT else keys
    require_one_slot(topology, watched, f"update() of group {group!r}")
    receipt: Receipt | None = None

    async def apply(current: list[bytes | None]) -> list[bytes] | None:
        nonlocal receipt
        stored = [
            None if raw is None else Envelope.decode(raw, key=key)
            for key, raw in zip(keys, current[: len(keys)], strict=True)
        ]
        newest = max((e.version for e in stored if e is not None), default=-1)
        new = fn(
            {n: (None if e is None else e.payload) for n, e in zip(names, stored, strict=True)}
        )
        if inspect.isawaitable(new):
            new = await new
        missing = [n for n in names if n not in new]
        if missing:
            raise ValueError(f"update function returned no value for {missing!r}")
        version = max(await versions.next_version(group, topology), newest + 1)
        versions.observe(version)
        token = new_token()
        out = [
            Envelope(version, token, as_payload(k, new[n])).encode()
            for k, n in zip(keys, names, strict=True)
        ]
        if mode is Mode.COMMIT:
            out.append(Envelope(version, token, commit_payload(keys)).encode())
        receipt = Receipt(group, version, token, tuple(keys), mode, atomic=True)
        return out

    for _ in range(max_attempts):
        if await topology.watch_update(watched, apply, expire_at_ms=expire_at(ttl)):
            if receipt is None:  # pragma: no cover - apply always sets it or raises
                raise RuntimeError("update finished without a receipt")
            return receipt
    raise WriteConflict(group.decode("utf-8", "backslashreplace"), max_attempts)
