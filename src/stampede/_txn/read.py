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

import logging
from collections.abc import Sequence
from typing import Any, TypeVar

from .. import metrics
from ..errors import (
    ConfigurationError,
    InvalidKeyError,
    MalformedEnvelope,
    MixedWritersError,
    ReadError,
    StampedeError,
)
from ..keys import to_bytes
from ..results import AtomicRead
from ..typing import Topology, VersionSource
from ..wire import Envelope, is_reserved
from ..wire._txn import Stamp, decode_meta, stamp_text
from .scripts import COMMIT, ROUND1, ROUND2
from .units import run_units, sides_of

__all__ = ["read_atomic", "required_versions"]

_log = logging.getLogger("stampede.read_atomic")

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
    keys = _check(names, attempts)
    sides = sides_of(topology, keys)
    moved: list[bytes] = []
    for attempt in range(1, attempts + 1):
        first = await run_units(topology, ROUND1, keys, sides, [()] * len(keys))
        _raise_errors(first)
        _refuse_other_types(keys, first)
        raws: list[bytes | None] = [pair[0] for pair in first]
        envelopes = [_decode(k, r) for k, r in zip(keys, raws, strict=True)]
        siblings = [decode_meta(pair[1]) for pair in first]
        _refuse_mixed(keys, raws, envelopes, siblings)
        need = required_versions(keys, envelopes, siblings)
        if not need:
            return _result(names, raws, envelopes, 1, attempt, versions)
        positions = sorted(need)
        found = await run_units(
            topology,
            ROUND2,
            [keys[p] for p in positions],
            [sides[p] for p in positions],
            [(stamp_text(need[p]), first[p][2]) for p in positions],
        )
        _raise_errors(found)
        moved = [keys[p] for p, (code, _) in zip(positions, found, strict=True) if code == b"r"]
        if moved:
            continue  # changed since round 1 in a way round 2 cannot place: read again
        for p, (code, _) in zip(positions, found, strict=True):
            if code == b"l":
                _lost(keys[p], need[p])
        prepared = [p for p, (code, _) in zip(positions, found, strict=True) if code == b"p"]
        for p, (code, raw) in zip(positions, found, strict=True):
            raws[p] = raw if code in (b"v", b"p") else None
            envelopes[p] = _decode(keys[p], raws[p])
        if prepared:
            await _complete(topology, keys, sides, prepared, need, round(grace * 1000))
        return _result(names, raws, envelopes, 2, attempt, versions)
    raise ReadError(
        f"read_atomic() of {len(keys)} keys: key {moved[0]!r} was rewritten between the "
        f"read's two rounds and the version the second round needed was already collected, "
        f"{attempts} times in a row (the read is slower than the grace window, {grace} s, "
        "or the key was rewritten more than 8 times meanwhile); retry, or raise the grace "
        "window"
    )


def _lost(key: bytes, stamp: Stamp) -> None:
    """A key whose transaction's version is gone for good reads as missing: counted,
    and logged with the cause, instead of failing every read of it from now on."""
    metrics.lost_version()
    metrics.log_event(
        _log,
        "read_atomic.lost_version",
        logging.WARNING,
        key=key.decode("utf-8", "backslashreplace"),
        transaction=stamp_text(stamp).decode(),
        cause="the key holds an older value and no record of the transaction: evicted "
        "under maxmemory, or an acknowledged write lost in a failover",
    )


def _check(names: Sequence[K], attempts: int) -> list[bytes]:
    """The keys as bytes; `InvalidKeyError` / `ConfigurationError` for bad input."""
    if isinstance(names, str | bytes) or not names:
        raise InvalidKeyError(
            "read_atomic() needs a non-empty list of key names, e.g. ['a', 'b']", key=None
        )
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ConfigurationError(f"read_atomic() needs attempts >= 1, got {attempts!r}")
    keys = [to_bytes(n) for n in names]
    if len(set(keys)) != len(keys):
        raise InvalidKeyError("read_atomic() names one key twice; name each key once")
    own = next((k for k in keys if is_reserved(k)), None)
    if own is not None:
        raise InvalidKeyError(
            f"read_atomic(): key {own!r} is one of stampede's own keys (a commit record, "
            "counter, kept versions, version hash or repair stream), not data; read the "
            "data keys it belongs to",
            key=own,
        )
    return keys


def _refuse_other_types(keys: Sequence[bytes], first: Sequence[Any]) -> None:
    """`InvalidKeyError` naming a key that holds another type (ROUND1 marks it), as a
    transaction refuses one."""
    for key, pair in zip(keys, first, strict=True):
        if len(pair) > 3:
            raise InvalidKeyError(
                f"read_atomic(): key {key!r} holds a non-string value (WRONGTYPE); "
                "stampede's keys must be plain strings: rename or delete it",
                key=key,
            )


def _refuse_mixed(
    keys: Sequence[bytes],
    raws: Sequence[bytes | None],
    envelopes: Sequence[Envelope | None],
    siblings: Sequence[frozenset[bytes] | None],
) -> None:
    """`MixedWritersError` for a key whose value no transaction wrote.

    A value stamped by a group write or a repair carries no transaction metadata,
    so nothing tells which other keys its write covered: a read of it could return
    half of that write. A value no stampede write stamped cannot be ordered at all.
    A tombstone (a delete) reads as missing, like an expired key.
    """
    bad = [
        k
        for k, raw, env, sibs in zip(keys, raws, envelopes, siblings, strict=True)
        if raw is not None and (env is None or (sibs is None and not env.tombstone))
    ]
    if bad:
        raise MixedWritersError(bad)


async def _complete(
    topology: Topology,
    keys: Sequence[bytes],
    sides: Sequence[bytes],
    positions: Sequence[int],
    need: dict[int, Stamp],
    grace_ms: int,
) -> None:
    """Commit, on the writer's behalf, the prepared versions round 2 had to fetch,
    under the transaction's own stamp and expiry (COMMIT takes it from the version's
    metadata, and writes nothing once that instant has passed). Only versions found
    prepared: a version found replaced or gone is never written back."""
    args = [(need[p][0], need[p][1], "") for p in positions]
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
