"""Plan and run a logical write: stamp every value, write through the guard, record last.

A write covers every key of its group. When all of them (and, in commit mode, the
commit record) share one hash slot, the whole write is one guarded Lua call: the
server applies it atomically. Otherwise each shard gets its keys in one call, all
shards at once, and in commit mode the record is written only after every data
key was acknowledged.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from .errors import (
    ClockSkewError,
    ConfigurationError,
    CrossSlotError,
    InvalidKeyError,
    InvalidValueError,
    OrderingError,
    PartialWriteError,
    RepliesLostError,
    ShardTimeout,
    WriteConflict,
    WriteTimeout,
)
from .keys import to_bytes
from .options import Durability
from .results import GuardCode, Receipt
from .topology._base import WriteOutcome
from .topology._guard import FOREIGN, FUTURE, KEEP_MS, KEPT, MIXED, WRONGTYPE
from .topology._node_ops import watch_update
from .typing import GuardStamp, Topology, VersionSource
from .verdict import Mode
from .versions import Counter, HybridClock
from .wire import (
    CLOCK_FLOOR,
    Envelope,
    VersionKind,
    commit_key,
    encode_commit,
    expire_at,
    is_reserved,
    kind_of,
    new_token,
)

__all__ = [
    "as_payload",
    "check_version",
    "fresher_limit",
    "limit_for",
    "plan_keys",
    "raise_refusals",
    "require_one_slot",
    "update_group",
    "write_group",
]

K = TypeVar("K", bytes, str)
UpdateFn = Callable[
    [dict[K, bytes | None]], Mapping[K, bytes | str] | Awaitable[Mapping[K, bytes | str]]
]


def as_payload(key: bytes, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidValueError(
        f"value for key {key!r} must be bytes or str, got {type(value).__name__}; "
        "serialise it first (or use stampede.TypedGroup for pydantic models)",
        key=key,
    )


def plan_keys(group: bytes, names: Iterable[bytes | str]) -> list[bytes]:
    """The keys of a write as bytes; `InvalidKeyError` before anything is sent if two
    names are one key (`"a"` and `b"a"`) or a key is named like stampede's own keys."""
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
        return list(known)
    keys: list[bytes] = []
    seen: set[bytes] = set()
    for name in names:
        key = to_bytes(name)
        if key in seen:
            raise InvalidKeyError(
                f"key {key!r} is named twice in one write of group {group!r} (as str and "
                "as bytes?); name each key once",
                key=name,
            )
        if is_reserved(key):
            raise InvalidKeyError(
                f"key {key!r} is named like one of stampede's own keys (<group>:stampede:"
                "commit, :stampede:version, a key's :stampede:p or :stampede:v, "
                "stampede:v:{...}, stampede:op:..., stampede:shard, stampede:repairs...) "
                "and would collide with one; rename it",
                key=name,
            )
        seen.add(key)
        keys.append(key)
    if len(_PLANNED) >= _PLANNED_MAX:
        _PLANNED.clear()
    _PLANNED[names] = tuple(keys)
    return keys


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
    """The next version for a write of `group` expiring at `at` (a `Counter` lives as
    long as the writes it versions)."""
    if isinstance(versions, Counter):
        return await versions.next_version(group, topology, expire_at_ms=at)
    return await versions.next_version(group, topology)


def limit_for(versions: VersionSource, version: int) -> int:
    """The newest stored clock version a write accepts as real (0: no check)."""
    if isinstance(versions, HybridClock) and kind_of(version) is VersionKind.CLOCK:
        return max(version, versions.horizon())
    return 0


def fresher_limit(clock: VersionSource, version: int, limit: int, codes: Iterable[int]) -> int:
    """A fresh limit when a key refused the version as `FUTURE` and the clock moved on
    since `limit` was set: a write held up meets a newer one, no skew (else 0)."""
    fresh = limit_for(clock, version) if limit and FUTURE in codes else 0
    return fresh if fresh > limit else 0


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
    against older writes until `ttl`, the grace period, runs out). `version`
    fixes the version (the application's own) instead of drawing one; `keep_ms`
    how long each replaced value is kept for group reads (a write that lands in one
    call, one slot, keeps none: no read sees it in part).
    """
    at = expire_at(ttl)
    if version is None:
        version = await draw_version(versions, group, topology, at)
        limit = limit_for(versions, version)
    else:
        limit = 0
    token = new_token()
    head = b"%d:%s" % (version, token.encode())
    encoded = [head if p is None else head + b":" + p for p in payloads]
    first = topology.slot_of(keys[0])
    one_slot = all(topology.slot_of(k) == first for k in keys[1:])
    ckey = commit_key(group)
    atomic = one_slot and (mode is Mode.STAMP or topology.slot_of(ckey) == first)
    stamp: GuardStamp = {
        "version": version,
        "token": token,
        "expire_at_ms": at,
        "keep_ms": 0 if atomic else keep_ms,  # one call: never seen in part
        "limit": limit,
    }
    if durability is not None:
        stamp["replicas"] = durability.replicas
        stamp["wait_ms"] = max(1, round(durability.timeout * 1000))
        stamp["aof"] = durability.aof

    async def put(sent: Sequence[bytes], values: Sequence[bytes]) -> WriteOutcome:
        outcome = await topology.write_guarded(sent, values, **stamp)
        fresh = fresher_limit(versions, version, stamp["limit"], outcome.results.values())
        if fresh:  # sent again (same stamp) under the fresh limit
            stamp["limit"] = fresh
            outcome = await topology.write_guarded(sent, values, **stamp)
        return outcome

    if mode is Mode.STAMP:
        outcome = await put(keys, encoded)
        _raise_for(group, outcome)
    else:
        record = head + b":" + encode_commit(keys)
        if atomic:
            outcome = await put([*keys, ckey], [*encoded, record])
            _raise_for(group, outcome)
        else:
            outcome = await put(keys, encoded)
            _raise_for(group, outcome)
            done = await put([ckey], [record])
            _raise_for(group, done, landed=keys)
            for shard, acks in done.acks.items():  # the record's shard: both must hold
                outcome.acks[shard] = min(acks, outcome.acks.get(shard, acks))
    superseded = tuple(k for k in keys if outcome.results.get(k) == KEPT)
    deleted = all(p is None for p in payloads)
    counts = outcome.acks.values()
    durable = None if durability is None else all(n >= durability.replicas for n in counts)
    return Receipt(
        group,
        version,
        token,
        tuple(keys),
        mode,
        atomic,
        superseded,
        deleted,
        replicas=dict(outcome.acks),
        durable=durable,
    )


_REFUSALS = {
    MIXED: (
        "mixed-sources",
        "the stored version is of the other kind (clock versions from a HybridClock "
        "against sequence versions from a Counter or the application), so the two cannot "
        "be ordered; keep one version source per group, or delete the group first",
    ),
    FUTURE: (
        "future",
        "the stored clock version is further ahead of this writer's clock than "
        "max_offset allows; a writer's clock ran ahead (or another program stamped it). "
        "Fix that clock; then delete the group or wait until that time has passed",
    ),
    FOREIGN: (
        "foreign",
        "the stored value looks like an envelope but its version cannot be ordered "
        "(2**63 or more, or leading zeros); another program wrote it: delete it",
    ),
}


def _raise_for(group: bytes, outcome: WriteOutcome, landed: Sequence[bytes] = ()) -> None:
    error = outcome.first_error()
    if error is not None:
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
            kind = ClockSkewError if code == FUTURE else OrderingError
            raise kind(group.decode("utf-8", "backslashreplace"), refused, why, detail)


def _check_orderable(
    group: bytes,
    keys: Sequence[bytes],
    stored: Sequence[Envelope | None],
    version: int,
    limit: int,
) -> None:
    """What the guard refuses, checked before an update plans its write."""
    for code, test in (
        (MIXED, lambda e: e.version and kind_of(e.version) is not kind_of(version)),
        (FUTURE, lambda e: limit and e.version > limit),
    ):
        refused = [k for k, e in zip(keys, stored, strict=True) if e is not None and test(e)]
        if refused:
            outcome = WriteOutcome(results=dict.fromkeys(refused, code))
            _raise_for(group, outcome)


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

    Exactly once: when the reply to EXEC is lost, the topology's operation marker
    tells whether it applied (the receipt is returned and `fn` is not run again)
    or can no longer apply (`fn` runs again on what is stored); when it cannot
    tell, `OutcomeUnknownError`.
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
        new = fn({n: (None if e is None else e.value) for n, e in zip(names, stored, strict=True)})
        if inspect.isawaitable(new):
            new = await new
        missing = [n for n in names if n not in new]
        if missing:
            raise InvalidKeyError(
                f"update function returned no value for {missing!r}; it must return the new "
                "payload of every key it was given (nothing was written)"
            )
        fresh = await draw_version(versions, group, topology, expire_at(ttl))
        _check_orderable(group, keys, stored, fresh, limit_for(versions, fresh))
        version = max(fresh, newest + 1)
        versions.observe(version)
        token = new_token()
        out = [
            Envelope(version, token, as_payload(k, new[n])).encode()
            for k, n in zip(keys, names, strict=True)
        ]
        if mode is Mode.COMMIT:
            out.append(Envelope(version, token, encode_commit(keys)).encode())
        receipt = Receipt(group, version, token, tuple(keys), mode, atomic=True)
        return out

    for _ in range(max_attempts):
        try:
            done = await watch_update(topology, watched, apply, expire_at_ms=expire_at(ttl))
        except RepliesLostError:
            done = True  # EXEC's reply was lost, but its operation marker says it applied
        if done:
            if receipt is None:  # pragma: no cover - apply always sets it or raises
                raise RuntimeError("update finished without a receipt")
            return receipt
    raise WriteConflict(group.decode("utf-8", "backslashreplace"), max_attempts)
