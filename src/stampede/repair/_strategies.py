"""The repair strategies: `NewestWins`, `Refetch`, `Enqueue`.

Each can be passed to `read(..., repair=...)` (or as the `repair` option of
`connect`) and run by the worker. In commit mode a group whose data is one whole
write but whose record is missing or older is rolled forward (the record is
written), never rewritten.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._write import check_version
from ..errors import ConfigurationError, InvalidValueError, RepairError, TornReadError
from ..results import RepairAction, RepairOutcome
from ..typing import RepairContext
from ..verdict import Observation, Status, Verdict
from ..wire import Envelope
from ..wire._txn import decode_meta, side_key
from ._base import (
    best_effort,
    grace_expiry,
    guarded_delete,
    kept_payloads_expiry,
    orders_after,
    rewrite,
    roll_forward,
)

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["Enqueue", "Loaded", "NewestWins", "Refetch"]

Rebuild = Callable[
    [Mapping[bytes, bytes], Sequence[bytes]],
    Mapping[bytes, bytes] | Awaitable[Mapping[bytes, bytes]],
]


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a `Refetch` loader returns when the source has versions of its own.

    `values` maps every key of the group to its payload, or is None when the
    source has no such entity; `version` is the source's own version of it (a
    row version, an `updated_at` in microseconds, a log position; 1..2**56-1).
    The repair is then ordered by the source: it is written under that version
    and refused if Redis already holds a newer one. An entity that is gone has no
    version: its delete is ordered after what Redis holds when `version` is older.
    """

    values: Mapping[bytes, bytes] | None
    version: int


Loader = Callable[[bytes, Sequence[bytes]], Awaitable[Mapping[bytes, bytes] | Loaded | None]]


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _torn(obs: Observation, verdict: Verdict, why: str) -> TornReadError:
    err = TornReadError(
        obs.group.decode("utf-8", "backslashreplace"),
        reason=str(verdict.reason),
        observation=obs,
        attempts=0,
    )
    err.args = (f"{err.args[0]} {why}",)
    return err


async def _deleted_by_transaction(
    ctx: RepairContext, obs: Observation, newest: Envelope
) -> frozenset[bytes] | None:
    """The keys a transaction wrote when the tombstone `newest` is that transaction's
    (its key's version hash holds its `m:` record), else None (a group delete)."""
    key = next(k for k, e in zip(obs.keys, obs.envelopes, strict=True) if e == newest)
    side = side_key(key, ctx.topology.slot_of)
    field = b"m:%d:%s" % (newest.version, newest.token.encode())
    return decode_meta(await ctx.topology.execute(side, "HGET", side, field))


class NewestWins:
    """The key with the newest (version, token) is the truth.

    `rebuild(truth, stale)` gets the payloads of the keys that carry the newest
    write and the names of the others, and returns new payloads for the others
    (for example settings derived from the profile). Without it, the current
    payloads are re-stamped under one new stamp: last writer wins per key, made
    consistent (it is not one logical write). A missing key cannot be re-stamped:
    give `rebuild` or use `Refetch`. When the newest write is a delete, the delete
    is completed: every key gets its tombstone.
    """

    name = "newest-wins"

    def __init__(self, rebuild: Rebuild | None = None) -> None:
        if rebuild is not None and not callable(rebuild):
            raise ConfigurationError(
                f"NewestWins(rebuild=...) takes a function (truth, stale) -> payloads of the "
                f"stale keys, or None; got {type(rebuild).__name__}"
            )
        self.rebuild = rebuild

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        rolled = await roll_forward(ctx, obs, verdict.reason)
        if rolled is not None:
            return rolled
        current = best_effort(obs)
        newest = obs.newest()
        if newest is not None and newest.tombstone:
            named = await _deleted_by_transaction(ctx, obs, newest)
            if named is not None and not set(obs.keys) <= named:
                raise _torn(
                    obs,
                    verdict,
                    "Its newest write is a transaction's delete of "
                    f"{sorted(named)!r}, not of the whole group: NewestWins cannot tell "
                    "what the group's other keys should hold, and deletes no key a write "
                    "did not delete. Use Refetch(loader) to reload the group from the "
                    "source of truth.",
                )
            gone: dict[bytes, bytes | None] = dict.fromkeys(obs.keys)
            until = await grace_expiry(ctx, obs.keys[0])
            return await rewrite(ctx, obs, gone, verdict.reason, expire_at_ms=until)
        if self.rebuild is None:
            missing = [k for k, v in current.items() if v is None]
            if missing:
                raise _torn(
                    obs,
                    verdict,
                    f"NewestWins without rebuild cannot repair it: key(s) {missing!r} are "
                    "missing or deleted, so there is no payload to re-stamp. Give "
                    "NewestWins(rebuild=...) to derive them from the newest write, or use "
                    "Refetch(loader) to reload the group from the source of truth.",
                )
            at = await kept_payloads_expiry(ctx, obs)  # no payload outlives its write
            return await rewrite(ctx, obs, current, verdict.reason, expire_at_ms=at)
        truth: dict[bytes, bytes] = {}
        stale: list[bytes] = []
        for key, env in zip(obs.keys, obs.envelopes, strict=True):
            if env is not None and newest is not None and env.token == newest.token:
                truth[key] = env.payload
            else:
                stale.append(key)
        try:
            made = await _maybe_await(self.rebuild(truth, stale))
        except Exception as exc:
            raise RepairError(obs.group, f"the rebuild raised {type(exc).__name__}: {exc}") from exc
        rebuilt = _payloads(obs, made, stale, loader=False)
        return await rewrite(ctx, obs, {**truth, **rebuilt}, verdict.reason)

    def __repr__(self) -> str:
        return f"NewestWins(rebuild={self.rebuild!r})"


class Refetch:
    """Rewrite the whole group from the authoritative source.

    `loader(group, keys)` (an async function, or a plain one) returns the payload
    (bytes) of every key, or None when
    the source has no such entity (the Redis copies are then replaced by
    tombstones, guarded), or a `Loaded(values, version)` carrying the source's own
    version, which then orders the repair. A loader that raises gives
    `RepairError` naming the group; one that returns something else gives
    `InvalidValueError` naming the key, before anything is written (and the same
    for a `NewestWins` rebuild). A loader that is not a function is refused here. With
    `fills_missing=True` a read of a group that is not in Redis at all also asks
    the loader (read-through), so missing copies are filled from the source.
    """

    name = "refetch"

    def __init__(self, loader: Loader, *, fills_missing: bool = False) -> None:
        if not callable(loader):
            raise ConfigurationError(
                "Refetch(loader) takes an async function (group, keys) -> payloads, "
                f"Loaded(values, version) or None; got {type(loader).__name__}"
            )
        if not isinstance(fills_missing, bool):
            raise ConfigurationError(
                f"Refetch's fills_missing is True or False, got {type(fills_missing).__name__}"
            )
        self.loader = loader
        self.fills_missing = fills_missing

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        rolled = await roll_forward(ctx, obs, verdict.reason)
        if rolled is not None:
            return rolled
        try:
            loaded = await _maybe_await(self.loader(obs.group, list(obs.keys)))
        except Exception as exc:
            raise RepairError(obs.group, f"the loader raised {type(exc).__name__}: {exc}") from exc
        version: int | None = None
        if isinstance(loaded, Loaded):
            try:
                version = check_version(loaded.version)
            except Exception as exc:
                raise RepairError(obs.group, f"the loader's Loaded.version: {exc}") from None
            loaded = loaded.values
        if loaded is None:
            if verdict.status is Status.NOT_FOUND and not orders_after(obs, version):
                return _still_gone(obs, verdict)  # a read-through: gone from both
            return await guarded_delete(ctx, obs, verdict.reason, source_version=version)
        payloads = _payloads(obs, loaded, obs.keys, loader=True)
        return await rewrite(ctx, obs, payloads, verdict.reason, source_version=version)

    def __repr__(self) -> str:
        return f"Refetch({getattr(self.loader, '__qualname__', self.loader)!r})"


def _still_gone(obs: Observation, verdict: Verdict) -> RepairOutcome:
    """A group that reads not found and that the source says is gone: nothing to
    write (rewriting its tombstones would only extend their life at every read).
    A source version newer than every stamp seen is written instead (`Refetch`):
    its tombstones keep older writes out."""
    env = verdict.envelope
    return RepairOutcome(
        obs.group,
        RepairAction.ALREADY_CONSISTENT,
        verdict.reason,
        dict.fromkeys(obs.keys),
        True,
        stamp=None if env is None else (env.version, env.token),
    )


def _payloads(
    obs: Observation, given: object, keys: Sequence[bytes], *, loader: bool
) -> dict[bytes, bytes | None]:
    """The payload of each of `keys` from what a Refetch `loader` (else a NewestWins
    rebuild) returned, checked before anything is written."""
    group = obs.group.decode("utf-8", "backslashreplace")
    who = "the Refetch loader" if loader else "the NewestWins rebuild"
    if not isinstance(given, Mapping):
        shape = (
            "a mapping key -> bytes, a Loaded(values, version), or None"
            if loader
            else "a mapping stale key -> bytes"
        )
        raise InvalidValueError(
            f"{who} for group {group!r} returned {type(given).__name__}; it must return "
            f"{shape}. Nothing was written."
        )
    missing = [k for k in keys if given.get(k) is None]
    if missing:
        named = [k for k in given if isinstance(k, str)]
        hint = (
            f" (it named {named[:3]!r} as str: the keys are bytes, as it was given them)"
            if named
            else ""
        )
        every = (
            "key of the group, or None when the entity does not exist" if loader else "stale key"
        )
        raise RepairError(
            obs.group,
            f"{who} returned no payload for {missing!r}{hint}; it must return every {every}",
        )
    out: dict[bytes, bytes | None] = {}
    for key in keys:
        value = given[key]
        if isinstance(value, bytearray | memoryview):
            value = bytes(value)
        if not isinstance(value, bytes):
            raise InvalidValueError(
                f"{who} for group {group!r} returned "
                f"{type(value).__name__} for key {key!r}; it must return bytes (encode "
                "text, serialise objects). Nothing was written.",
                key=key,
            )
        out[key] = value
    return out


class Enqueue:
    """Queue the group for the repair worker and return the best-effort merge now.

    The read result is marked not consistent and `queued`; the worker repairs the
    group later with its own strategy. One job per group is pending at a time.
    """

    name = "enqueue"

    def __init__(self, queue: RepairQueue) -> None:
        self.queue = queue

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        job = await self.queue.enqueue(
            obs.group,
            list(obs.keys),
            obs.seen(),
            str(verdict.reason or "torn"),
            mode=obs.mode.value,
        )
        detail = {"job": job} if job is not None else {"job": "already pending"}
        return RepairOutcome(
            obs.group, RepairAction.QUEUED, verdict.reason, best_effort(obs), False, detail=detail
        )

    def __repr__(self) -> str:
        return f"Enqueue({self.queue!r})"
