"""`read_atomic`: read any keys and never return part of a transaction (RAMP-Fast).

Round 1 fetches each key's current value and, for a value a transaction wrote,
the list of keys that transaction wrote. For each key the newest transaction
that (by those lists) wrote it is the version the read must return at least;
where round 1 returned something older, round 2 fetches exactly that version by
its stamp from the key's version hash. Round 2 is skipped when nothing is
missing, which is the usual case.

A version that round 2 found prepared but not yet current belongs to a
transaction whose writer has not committed it there (still committing, or died
after committing elsewhere). The reader commits it there itself (the commit is
idempotent and guarded), so a dead writer's transaction is completed by the
first reader that needs it.

A second-round version collected meanwhile (the read was slower than the grace
window) makes the read start again; after `attempts` tries it raises
`ReadError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from ..errors import InvalidKeyError, MalformedEnvelope, ReadError, StampedeError
from ..keys import to_bytes
from ..results import AtomicRead
from ..typing import Topology, VersionSource
from ..wire import Envelope
from ..wire._txn import Stamp, decode_meta, side_key, stamp_text
from .scripts import COMMIT, ROUND1, ROUND2
from .write import run_units

__all__ = ["read_atomic", "required_versions"]

K = TypeVar("K", bytes, str)


def _decode(key: bytes, raw: bytes | None) -> Envelope | None:
    if raw is None:
        return None
    try:
        return Envelope.decode(raw, key=key)
    except MalformedEnvelope:
        return None  # a value no stampede write stamped: no stamp, no siblings


def required_versions(
    keys: Sequence[bytes],
    envelopes: Sequence[Envelope | None],
    siblings: Sequence[frozenset[bytes] | None],
) -> dict[int, Stamp]:
    """Positions whose round-1 value is older than a returned transaction requires,
    with the stamp each must be read at (RAMP-Fast's second round). Pure."""
    wanted: dict[bytes, Stamp] = {}
    for env, sibs in zip(envelopes, siblings, strict=True):
        if env is None or not sibs:
            continue
        stamp = (env.version, env.token)
        for other in sibs:
            if other not in wanted or wanted[other] < stamp:
                wanted[other] = stamp
    out: dict[int, Stamp] = {}
    for pos, (key, env) in enumerate(zip(keys, envelopes, strict=True)):
        need = wanted.get(key)
        if need is None:
            continue
        if env is None or (env.version, env.token) < need:
            out[pos] = need
    return out


async def read_atomic(
    topology: Topology,
    names: Sequence[K],
    *,
    attempts: int = 3,
    grace: float = 5.0,
    versions: VersionSource | None = None,
) -> AtomicRead[K]:
    """Read `names` (any keys, any shards) read-atomically; see the module notes."""
    if isinstance(names, str | bytes) or not names:
        raise InvalidKeyError(
            "read_atomic() needs a non-empty list of key names, e.g. ['a', 'b']", key=None
        )
    keys = [to_bytes(n) for n in names]
    if len(set(keys)) != len(keys):
        raise InvalidKeyError("read_atomic() names one key twice; name each key once")
    sides = [side_key(k, topology.slot_of) for k in keys]
    for attempt in range(1, attempts + 1):
        first = await run_units(topology, ROUND1, keys, sides, [()] * len(keys))
        _raise_errors(first)
        raws: list[bytes | None] = [pair[0] for pair in first]
        envelopes = [_decode(k, r) for k, r in zip(keys, raws, strict=True)]
        siblings = [decode_meta(pair[1]) for pair in first]
        need = required_versions(keys, envelopes, siblings)
        if not need:
            return _result(names, raws, envelopes, 1, attempt, versions)
        positions = sorted(need)
        found = await run_units(
            topology,
            ROUND2,
            [keys[p] for p in positions],
            [sides[p] for p in positions],
            [(stamp_text(need[p]),) for p in positions],
        )
        _raise_errors(found)
        if any(f is None for f in found):
            continue  # collected since round 1: read again
        for p, raw in zip(positions, found, strict=True):
            raws[p] = raw
            envelopes[p] = _decode(keys[p], raw)
        await _complete(topology, keys, sides, positions, need, round(grace * 1000))
        return _result(names, raws, envelopes, 2, attempt, versions)
    raise ReadError(
        f"read_atomic() of {len(keys)} keys: versions its second round needed were "
        f"collected {attempts} times in a row (each read was slower than the grace window, "
        f"{grace} s); retry, or raise the grace window"
    )


async def _complete(
    topology: Topology,
    keys: Sequence[bytes],
    sides: Sequence[bytes],
    positions: Sequence[int],
    need: dict[int, Stamp],
    grace_ms: int,
) -> None:
    """Commit, on the writer's behalf, the prepared versions round 2 had to fetch."""
    args = [(need[p][0], need[p][1], "", 0, b"", b"") for p in positions]
    try:
        await run_units(
            topology,
            COMMIT,
            [keys[p] for p in positions],
            [sides[p] for p in positions],
            args,
            head=[grace_ms],
        )
    except StampedeError:  # completing is a courtesy: the read is already whole
        return


def _raise_errors(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply


def _result(
    names: Sequence[K],
    raws: Sequence[bytes | None],
    envelopes: Sequence[Envelope | None],
    rounds: int,
    attempt: int,
    versions: VersionSource | None,
) -> AtomicRead[K]:
    values: dict[K, bytes | None] = {}
    stamps: dict[K, tuple[int, str] | None] = {}
    for name, raw, env in zip(names, raws, envelopes, strict=True):
        values[name] = env.value if env is not None else raw
        stamps[name] = None if env is None else (env.version, env.token)
        if env is not None and versions is not None:
            versions.observe(env.version)
    return AtomicRead(values, rounds, stamps, attempt)
