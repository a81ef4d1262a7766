"""Plan and run a logical write: stamp every value, write through the guard, record last.

A write covers every key of its group. When all of them (and, in commit mode, the
commit record) share one hash slot, the whole write is one guarded Lua call: the
server applies it atomically. Otherwise each shard gets its keys in one call, all
shards at once, and in commit mode the record is written only after every data
key was acknowledged.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any

from . import tracing
from ._future import DeletePut, Put, fresh_limit, fresher_limit, limit_for
from ._payload import as_payload as as_payload
from ._payload import payloads_of as payloads_of
from .errors import (
    ClockSkewError,
    ConfigurationError,
    CrossSlotError,
    InvalidKeyError,
    OrderingError,
    PartialWriteError,
    ShardTimeout,
    WriteTimeout,
)
from .keys import to_bytes
from .options import Durability
from .results import GuardCode, Receipt, new_receipt
from .topology._base import WriteOutcome
from .topology._guard import EXPIRED, FOREIGN, FUTURE, KEEP_MS, KEPT, MIXED, WRONGTYPE
from .typing import GuardStamp, Topology, VersionSource
from .verdict import Mode
from .versions import Counter, HybridClock
from .wire import (
    CLOCK_FLOOR,
    commit_key,
    encode_commit,
    expire_at,
    is_reserved,
    new_token,
)

__all__ = [
    "as_payload",
    "check_version",
    "fresher_limit",
    "limit_for",
    "payloads_of",
    "plan_keys",
    "planned_keys",
    "raise_for",
    "raise_refusals",
    "require_one_slot",
    "traced_write",
    "write_group",
]


def plan_keys(group: bytes, names: Iterable[bytes | str]) -> list[bytes]:
    """The keys of a write as bytes; `InvalidKeyError` before anything is sent if two
    names are one key (`"a"` and `b"a"`) or a key is named like stampede's own keys."""
    return list(planned_keys(group, names))


def planned_keys(group: bytes, names: Iterable[bytes | str]) -> tuple[bytes, ...]:
    """`plan_keys` as a tuple, the one remembered for these names (not a copy)."""
    if isinstance(names, str | bytes):
        raise InvalidKeyError(
            f"the keys of group {group!r} must be a list of key names, not one "
            f"{type(names).__name__}; write [{names!r}]",
            key=names,
        )
    names = tuple(names)
    try:
        known = _PLANNED.get(names)
    except TypeError:  # an unhashable name: checked (and refused) below
        known = None
    if known is not None:
        return known
    keys: list[bytes] = []
    seen: set[bytes] = set()
    for name in names:
        key = to_bytes(name)
        if key in seen:
            both = len({type(n) for n in names if to_bytes(n) == key}) > 1
            raise InvalidKeyError(
                f"key {key!r} is named twice in one call on group {group!r}"
                + (" (as str and as bytes)" if both else "")
                + "; name each key once",
                key=name,
            )
        if is_reserved(key):
            raise InvalidKeyError(
                f"key {key!r} is named like one of stampede's own keys (<group>:stampede:"
                "commit, :stampede:version, a key's :stampede:p(:u) or :stampede:v(:u), "
                "stampede:v:{...}, stampede:op:..., stampede:shard, stampede:repairs...) "
                "and would collide with one; rename it",
                key=name,
            )
        seen.add(key)
        keys.append(key)
    if len(_PLANNED) >= _PLANNED_MAX:
        _PLANNED.clear()
    known = _PLANNED[names] = tuple(keys)
    return known


_PLANNED: dict[tuple[bytes | str, ...], tuple[bytes, ...]] = {}
"""Key lists already checked by `plan_keys` (groups are read and written again and
again); cleared when it reaches `_PLANNED_MAX` entries."""
_PLANNED_MAX = 4096


def check_version(version: int) -> int:
    """An application's own version: an int in 1..2**56-1 (the sequence kind), or
    `ConfigurationError`. Larger versions are the hybrid clock's: an application
    version there would be ordered against clock time."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigurationError(f"version must be an int, got {type(version).__name__}")
    if not 1 <= version < CLOCK_FLOOR:
        raise ConfigurationError(
            f"version must be in 1..2**56-1 (an application's own version: a row version, "
            f"an updated_at in microseconds, a log position), got {version}; 2**56 and above "
            "belong to the hybrid clock"
        )
    return version


async def draw_version(
    versions: VersionSource, group: bytes, topology: Topology, at: int | None
) -> int:
    """The next version for a write of `group` expiring at `at` (as its writes live)."""
    if isinstance(versions, Counter):
        return await versions.next_version(group, topology, expire_at_ms=at)
    return await versions.next_version(group, topology)


async def write_group(
    topology: Topology,
    group: bytes,
    keys: Sequence[bytes],
    payloads: Sequence[bytes | None],
    *,
    mode: Mode,
    versions: VersionSource,
    ttl: float | None,
    version: int | None = None,
    keep_ms: int = KEEP_MS,
    durability: Durability | None = None,
) -> Receipt:
    """Stamp and write every key of a group; raise `PartialWriteError` if a shard failed.

    A payload of None writes a tombstone (the key is deleted, and stays deleted
    against older writes until `ttl`, the grace period, runs out). `version` fixes
    the version (the application's own) instead of drawing one; `keep_ms` how long
    each replaced value is kept for group reads (none for one call in one slot).
    """
    at, counted = None if ttl is None else expire_at(ttl), version is None
    if version is not None:
        limit = 0
    elif type(versions) is HybridClock:  # its next_version, without a coroutine
        version, limit = versions.stamp()
    else:
        version = await draw_version(versions, group, topology, at)
        limit = limit_for(versions, version)
    token = new_token()
    head = b"%d:%s" % (version, token.encode())
    lead = head + b":"
    if None in payloads:  # tombstones: `<version>:<token>`
        encoded = [head if p is None else lead + p for p in payloads]
    else:
        encoded = list(map(lead.__add__, payloads))  # type: ignore[arg-type]
    stamp: GuardStamp = {
        "version": version,
        "token": token,
        "expire_at_ms": at,
        "keep_ms": keep_ms,
        "limit": limit,
    }
    if durability is not None:
        stamp["replicas"] = durability.replicas
        stamp["wait_ms"] = max(1, round(durability.timeout * 1000))
        stamp["aof"] = durability.aof
    # a delete clears what a clock far ahead stamped (_future.py); a write is refused
    deleting = payloads.count(None) == len(payloads)
    put = DeletePut(topology, versions) if deleting else topology.write_guarded
    if mode is Mode.STAMP:
        atomic = _one_slot(topology, keys)  # one slot: one server-side step
        if atomic:  # one call: never seen in part, so nothing kept for readers
            stamp["keep_ms"] = 0
        outcome = await put(keys, encoded, **stamp)
        codes = outcome.results.values()
        if limit and FUTURE in codes and fresh_limit(versions, stamp, outcome):
            outcome = await put(keys, encoded, **stamp)  # sent again, same stamp
            codes = outcome.results.values()
        if outcome.failed or (codes and min(codes) < 0):  # else written, or kept out
            raise_for(group, outcome)
    else:
        outcome, atomic = await _committed(
            topology, put, versions, group, keys, encoded, lead, stamp
        )
    results, acks = outcome.results, outcome.acks
    kept = KEPT in results.values()
    superseded = tuple(k for k in keys if results.get(k) == KEPT) if kept else ()
    if superseded and counted and isinstance(versions, Counter):
        await versions.catch_up(group, topology, superseded)
    durable = None if durability is None else all(n >= durability.replicas for n in acks.values())
    return new_receipt(
        group,
        version,
        token,
        keys if type(keys) is tuple else tuple(keys),
        mode,
        atomic,
        superseded,
        deleting,  # deleted: tombstones only
        dict(acks) if acks else {},
        durable,
    )


async def traced_write(
    write: Coroutine[Any, Any, Receipt], group: bytes, keys: int, mode: Mode
) -> Receipt:
    """`write` (a `write_group`) in its `stampede.write` span, when spans are recorded."""
    with tracing.span(
        "write", group=group.decode("utf-8", "backslashreplace"), keys=keys, mode=mode.value
    ) as traced:
        receipt = await write
        traced.set(
            version=receipt.version,
            token=receipt.token,
            atomic=receipt.atomic,
            superseded=len(receipt.superseded),
        )
    return receipt


async def _committed(
    topology: Topology,
    put: Put,
    versions: VersionSource,
    group: bytes,
    keys: Sequence[bytes],
    encoded: list[bytes],
    lead: bytes,
    stamp: GuardStamp,
) -> tuple[WriteOutcome, bool]:
    """A commit-mode write: its keys and record in one call when they share one slot
    (atomic), else the keys first and the record once every key was acknowledged."""
    record = lead + encode_commit(keys)
    ckey = commit_key(group)
    slot = topology.slot_of(ckey)
    atomic = all(topology.slot_of(k) == slot for k in keys)
    if atomic:  # one call: never seen in part, so nothing kept for readers
        stamp["keep_ms"] = 0
    sends = [([*keys, ckey], [*encoded, record])] if atomic else [(keys, encoded)]
    if not atomic:
        sends.append(([ckey], [record]))
    outcomes: list[WriteOutcome] = []
    for sent, values in sends:
        done = await put(sent, values, **stamp)
        if stamp["limit"] and fresh_limit(versions, stamp, done):  # sent again, same stamp
            done = await put(sent, values, **stamp)
        raise_for(group, done, landed=keys if outcomes else ())
        outcomes.append(done)
    outcome = outcomes[0]
    for done in outcomes[1:]:
        for shard, n in done.acks.items():  # the record's shard: both must hold
            outcome.acks[shard] = min(n, outcome.acks.get(shard, n))
    return outcome, atomic


def _one_slot(topology: Topology, keys: Sequence[bytes]) -> bool:
    """Do all of `keys` live in one slot? Remembered per key tuple, with its topology."""
    known = _SLOTS.get(keys) if type(keys) is tuple else None
    if known is not None and known[0]() is topology:
        return known[1]
    first = topology.slot_of(keys[0])
    one = all(topology.slot_of(key) == first for key in keys[1:])
    if type(keys) is tuple and hasattr(topology, "__weakref__"):
        if len(_SLOTS) >= _PLANNED_MAX:
            _SLOTS.clear()
        _SLOTS[keys] = (weakref.ref(topology), one)
    return one


_SLOTS: dict[tuple[bytes, ...], tuple[weakref.ref[Topology], bool]] = {}


_REFUSALS = {
    MIXED: (
        "mixed-sources",
        "the stored version is of the other kind (clock versions from a HybridClock "
        "against sequence versions from a Counter or the application), so the two cannot "
        "be ordered; keep one version source per group, or DEL its keys outside stampede",
    ),
    FUTURE: (
        "future",
        "the stored clock version is further ahead of this writer's clock than "
        "max_offset allows; a writer's clock ran ahead (or another program stamped it). Fix "
        "it; then delete the group (delete() clears such values) or wait",
    ),
    FOREIGN: (
        "foreign",
        "the stored value looks like an envelope but its version cannot be ordered "
        "(2**63 or more, or leading zeros); another program wrote it: DEL it outside stampede",
    ),
    EXPIRED: (
        "expired",
        "the write's expiry instant (now plus its ttl, or the tombstone grace, by this "
        "writer's clock) had already passed by the server's clock when it landed, so it "
        "would have vanished at once; nothing was written there. Either this writer's "
        "clock is behind by more than the ttl (fix it: NTP) or the write took longer than "
        "its ttl to arrive; write again, or with a longer ttl",
    ),
}


def raise_for(group: bytes, outcome: WriteOutcome, landed: Sequence[bytes] = ()) -> None:
    """Raise what a guarded write's outcome means, if it is not a success."""
    if outcome.failed:
        error = next(iter(outcome.failed.values()))
        cls = WriteTimeout if isinstance(error, ShardTimeout) else PartialWriteError
        raise cls(
            group.decode("utf-8", "backslashreplace"),
            landed=[*landed, *outcome.results],
            failed=list(outcome.failed),
            cause=error,
        ) from error
    raise_refusals(group, outcome.results)


def raise_refusals(group: bytes, codes: Mapping[bytes, int]) -> None:
    """Raise what the guard's refusal codes in `codes` (key -> code) mean, if any."""
    if not codes or min(codes.values()) >= 0:  # written, already there, or kept
        return  # (the common case, checked first: WITHHELD is below 0 too)
    codes = {k: c for k, c in codes.items() if c != GuardCode.WITHHELD}
    if not codes or min(codes.values()) >= 0:  # written, already there, or kept
        return
    wrong = [k for k, c in codes.items() if c == WRONGTYPE]
    if wrong:
        raise InvalidKeyError(
            f"key {wrong[0]!r} holds a non-string value (WRONGTYPE); stampede's keys must be "
            "plain strings: rename or delete it",
            key=wrong[0],
        )
    for code, (why, detail) in _REFUSALS.items():
        refused = [k for k, c in codes.items() if c == code]
        if refused:
            kind = ClockSkewError if code in (FUTURE, EXPIRED) else OrderingError
            raise kind(group.decode("utf-8", "backslashreplace"), refused, why, detail)


def require_one_slot(topology: Topology, keys: Sequence[bytes], operation: str) -> None:
    """`CrossSlotError` naming the keys and their slots unless they share one slot."""
    slots = {k: topology.slot_of(k) for k in keys}
    if len(set(slots.values())) > 1:
        raise CrossSlotError(slots, operation=operation)
