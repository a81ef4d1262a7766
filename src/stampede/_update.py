"""Optimistic read-modify-write of a co-located group (`Stampede.update`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from ._write import as_payload, draw_version, limit_for, raise_for, require_one_slot
from .errors import (
    ClockSkewError,
    InvalidKeyError,
    InvalidValueError,
    RepliesLostError,
    WriteConflict,
)
from .keys import to_bytes
from .options import check_count
from .results import Receipt
from .topology._base import WriteOutcome
from .topology._floor import floor_commands
from .topology._guard import EXPIRED, FUTURE, MIXED
from .topology._node_ops import watch_update
from .typing import Topology, VersionSource
from .verdict import Mode
from .wire import Envelope, commit_key, encode_commit, expire_at, kind_of, new_token

__all__ = ["UpdateFn", "update_group"]

K = TypeVar("K", bytes, str)
UpdateFn = Callable[
    [dict[K, bytes | None]], Mapping[K, bytes | str] | Awaitable[Mapping[K, bytes | str]]
]


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
            raise_for(group, outcome)


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
    max_attempts = check_count(max_attempts, "update()'s max_attempts")
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
        if not isinstance(new, Mapping):
            raise InvalidValueError(
                f"update function returned {type(new).__name__}; it must return a mapping "
                "of every key it was given to its new payload (nothing was written)"
            )
        given = set(keys)
        extra = [k for k in new if to_bytes(k) not in given]
        if extra:
            raise InvalidKeyError(
                f"update function returned a value for {extra!r}, a key it was not given; "
                "name every key to write in update()'s keys (nothing was written)"
            )
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

    def floors(values: list[bytes]) -> list[tuple[object, ...]]:
        # a write that is no transaction's raises its keys' floors, as the guard does
        # (a transaction pending at a key stays superseded once this value is gone)
        return floor_commands(topology, keys, values[: len(keys)])

    for _ in range(max_attempts):
        done = await _attempt(topology, group, watched, apply, expire_at(ttl), floors)
        if done:
            if receipt is None:  # pragma: no cover - apply always sets it or raises
                raise RuntimeError("update finished without a receipt")
            return receipt
    raise WriteConflict(group.decode("utf-8", "backslashreplace"), max_attempts)


async def _attempt(
    topology: Topology,
    group: bytes,
    watched: list[bytes],
    apply: Callable[[list[bytes | None]], Awaitable[list[bytes] | None]],
    at: int | None,
    floors: Callable[[list[bytes]], Sequence[tuple[object, ...]]],
) -> bool:
    """One WATCH ... EXEC of `update_group` (`watch_update`): True when it ran."""
    try:
        return await watch_update(topology, watched, apply, expire_at_ms=at, then=floors)
    except RepliesLostError:
        return True  # EXEC's reply was lost, but its operation marker says it applied
    except ClockSkewError as exc:  # expired by the server's clock: named for the group
        raise_for(group, WriteOutcome(results=dict.fromkeys(exc.keys, EXPIRED)))
        raise
