"""The sweep: roll forward transactions whose writer died mid-commit, and collect
version hashes of keys that are no longer written.

A commit collects its own key's version hash as it goes, so a key written
again and again keeps only what the grace window asks for. A key written once
more and then left alone keeps the version it replaced until something collects
it: `sweep` walks every shard with SCAN for version hashes and collects each, so
after the grace window every key is back to its current version alone.

On the way it rolls forward: a version prepared at a key but not current there,
whose transaction is the current value of one of its sibling keys, was committed
(a commit starts only once every prepare was acknowledged) by a writer that died
before reaching this key. The sweep commits it here (idempotent and guarded), as
a reader that needed it would. The repair worker runs the sweep periodically; it
can also be called directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError, MalformedEnvelope, ShardResponseError
from ..topology._guard import CAS
from ..typing import Topology
from ..wire import COMMIT_SUFFIX, Envelope, decode_commit
from ..wire._txn import Stamp, decode_meta, mark_record, marked, parse_stamp, side_key
from .scripts import COLLECT, COMMIT
from .units import sides_of
from .write import PREPARE_HOLD_MS

__all__ = ["UNDECIDED_MS", "Pending", "complete_pending", "sweep"]

_PATTERNS = (b"*:stampede:v", b"*:stampede:v:u", b"stampede:v:{*")
_RECORDS = b"*" + COMMIT_SUFFIX


async def sweep(
    topology: Topology,
    *,
    grace: float = 5.0,
    count: int = 500,
    hold: float = PREPARE_HOLD_MS / 1000,
) -> int:
    """Collect every version hash on every shard; returns how many were visited.

    A hash left with nothing a reader needs is deleted; a prepared version that no
    commit made current within `hold` seconds counts as abandoned. A commit record
    whose keys are all gone (deleted or expired by writes that were not commit-mode
    writes of its group) vouches for nothing and is deleted too."""
    grace_ms, hold_ms = _ms("grace", grace), _ms("hold", hold)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"count must be a whole number of keys, at least 1, got {count!r}")
    # Two passes: every hash rolls forward before any is collected, so that a
    # collection never takes commit marks (evidence for a sibling still pending,
    # `_decided`) from a sweep that has not completed everything they vouch for; a
    # pass that fails on the way (a shard down) collects nothing.
    async for key in _scan(topology, _PATTERNS, b"hash", count):
        await _forward(topology, key, grace_ms)
    visited = 0
    async for key in _scan(topology, _PATTERNS, b"hash", count):
        visited += await _collect(topology, key, grace_ms, hold_ms)
    async for key in _scan(topology, (_RECORDS,), b"string", count):
        visited += await _collect_record(topology, key)
    return visited


def _ms(name: str, seconds: float) -> int:
    """`seconds` in whole milliseconds, at least 1; a `ConfigurationError` naming the
    argument for anything that is no finite number of seconds (NaN, infinity, a str)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds, got {seconds!r}")
    if not 0 <= seconds < 10**10:  # (NaN fails this too)
        raise ConfigurationError(
            f"{name} must be a number of seconds, 0 to 10**10, got {seconds!r}"
        )
    return max(1, round(seconds * 1000))


async def _scan(
    topology: Topology, patterns: Sequence[bytes], kind: bytes, count: int
) -> AsyncIterator[bytes]:
    """Every key of type `kind` matching one of `patterns`, on every shard."""
    for shard in topology.shard_names:
        for pattern in patterns:
            cursor = b"0"
            while True:
                cursor, found = await topology.execute_on(
                    shard, "SCAN", cursor, "MATCH", pattern, "COUNT", count, "TYPE", kind
                )
                for key in found:
                    yield key
                if cursor in (b"0", 0, "0"):
                    break


async def _collect_record(topology: Topology, key: bytes) -> int:
    """Delete the commit record `key` if every key it names is gone (compare-and-set:
    a record rewritten meanwhile stays)."""
    raw = await topology.execute(key, "GET", key)
    record = decode_commit(raw, key[: -len(COMMIT_SUFFIX)])
    if record is None or not record.keys:
        return 0
    held = await topology.fetch(sorted(record.keys))
    if any(value is not None for value in held):
        return 0
    await topology.script(CAS, [key], [0, "1", raw, "d", b""])
    return 1


async def _forward(topology: Topology, side: bytes, grace_ms: int) -> None:
    key = await topology.execute(side, "HGET", side, "k")
    if key is None:
        return
    try:
        await _roll_forward(topology, key, side, grace_ms)
    except ShardResponseError:  # the data key holds another type now: leave it
        return


async def _collect(topology: Topology, side: bytes, grace_ms: int, hold_ms: int) -> int:
    key = await topology.execute(side, "HGET", side, "k")
    if key is None:
        return 0
    try:
        await topology.script(COLLECT, [key, side], [grace_ms, hold_ms])
    except ShardResponseError:  # the data key holds another type now: leave it
        return 0
    return 1


def _stamp_of(key: bytes, raw: bytes | None) -> Stamp | None:
    if raw is None:
        return None
    try:
        env = Envelope.decode(raw, key=key)
    except MalformedEnvelope:
        return None
    return env.version, env.token


UNDECIDED_MS = 60_000
"""How long a prepared version no sibling holds yet counts as a transaction still
committing (its writer is within its timeouts), which a repair leaves alone."""


@dataclass(frozen=True)
class Pending:
    """What `complete_pending` found at a group's keys."""

    completed: int
    """Keys where a transaction that a sibling already held is now current, committed
    by this call (or, its reply lost, by the first try of it, or meanwhile by another
    reader): the keys changed since they were read."""
    undecided: tuple[bytes, ...]
    """Keys holding a prepared version of a transaction that is still committing."""


async def complete_pending(topology: Topology, keys: Sequence[bytes], *, grace: float) -> Pending:
    """Complete, at `keys`, every transaction that is committed elsewhere but still
    pending here, and name the keys where one is still committing (what a repair
    does before it writes: it never restamps a key over a transaction that is
    visible at a sibling, nor under one that may still commit)."""
    grace_ms = max(1, round(grace * 1000))
    sides = sides_of(topology, keys)
    present = await asyncio.gather(*(topology.execute(s, "EXISTS", s) for s in sides))
    done = 0
    undecided: list[bytes] = []
    for key, side, exists in zip(keys, sides, present, strict=True):
        if exists:
            rolled = await _roll_forward(topology, key, side, grace_ms, undecided=True)
            done += rolled.completed
            undecided.extend(rolled.undecided)
    return Pending(done, tuple(undecided))


async def _roll_forward(
    topology: Topology, key: bytes, side: bytes, grace_ms: int, *, undecided: bool = False
) -> Pending:
    """Commit here each newer prepared version whose transaction a sibling holds;
    with `undecided`, also name the key if a newer prepared version that no sibling
    holds was prepared less than `UNDECIDED_MS` ago (by the server's clock)."""
    done, waiting = 0, False
    current = _stamp_of(key, await topology.execute(key, "GET", key))
    fields = await topology.execute(side, "HGETALL", side)
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    for name, meta in sorted(pairs.items()):
        if not name.startswith(b"m:") or b"x:" + name[2:] in pairs:
            continue
        stamp = parse_stamp(name[2:])
        if current is not None and stamp <= current:
            continue
        siblings = sorted((decode_meta(meta) or frozenset()) - {key})
        if await _decided(topology, siblings, stamp):
            args = [grace_ms, stamp[0], stamp[1], ""]
            (code,) = await topology.script(COMMIT, [key, side], args)
            if code in (1, 2):  # made current; or already current (a resend after a
                done += 1  # lost reply, or another reader's completion): changed
                current = stamp
        elif undecided and b"d:" + name[2:] in pairs:
            waiting = waiting or await _recent(topology, side, meta)
    return Pending(done, (key,) if waiting else ())


async def _decided(topology: Topology, siblings: Sequence[bytes], stamp: Stamp) -> bool:
    """Was the transaction `stamp` committed? Yes when a sibling holds it, or a
    sibling's commit marks (its version hash's fields `t` and `u`, the 64 to 80 last) say
    that its commit reached it: a commit starts only once every prepare was
    acknowledged, so it must complete everywhere, even where every sibling has moved
    on since."""
    if not siblings:
        return False
    held = await topology.fetch(siblings)
    if any(_stamp_of(k, raw) == stamp for k, raw in zip(siblings, held, strict=True)):
        return True
    record = mark_record(stamp)
    for sibling in siblings:
        side = side_key(sibling, topology.slot_of)
        recent, older, legacy = await topology.execute(side, "HMGET", side, "t", "u", "c")
        # (a legacy record ends in its only `;`: a match is a whole record)
        if marked(recent, stamp[1]) or marked(older, stamp[1]) or record in (legacy or b""):
            return True
    return False


async def _recent(topology: Topology, side: bytes, meta: bytes) -> bool:
    """Was this version prepared less than `UNDECIDED_MS` ago, by the server's clock?"""
    head = meta.split(b":", 1)[0]
    if not head.isdigit():
        return False
    seconds, micros = await topology.execute(side, "TIME")
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    return now_ms - int(head) < UNDECIDED_MS
