"""Scatter a group's keys over per-shard coalescers and gather the answers in order.

Both topologies split a plan into (coalescer, positions) parts, one per shard or
node; these two functions do the rest the same way for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..errors import ShardError
from ._base import READ_WATCH, WriteOutcome, carried
from ._coalesce import Coalescer, Fanin
from ._floor import client_named, needs_floors, raise_floors
from ._guard import WriteRequest, requests_for

if TYPE_CHECKING:
    from ..typing import GuardStamp, Topology

__all__ = [
    "PLANS_MAX",
    "FetchPlans",
    "Part",
    "WritePlan",
    "fetch_parts",
    "requests_of",
    "write_parts",
    "write_plan",
]

Part = tuple[Coalescer[Any, Any], list[int]]
PLANS_MAX = 1 << 16
"""The most key tuples a topology keeps the write parts of (`write_plan`)."""


async def fetch_parts(
    keys: Sequence[bytes],
    parts: list[Part],
    names: Sequence[str],
    requests: Sequence[list[bytes]],
    order: Callable[[list[bytes | None]], Sequence[bytes | None]] | None = None,
) -> list[bytes | None]:
    """GET every key through its shard's coalescer; the first failing shard raises.

    `requests` holds each part's keys (`keys` at its positions; a plan used again
    may hand over the same lists again: nothing here or in a coalescer changes them).
    A read cancelled while its answers are out (its deadline passed) names the
    shards it waited on (`names`, in `parts` order) in its `ReadWatch` (in
    `READ_WATCH`), if any; nothing else touches the watch. `order` (a remembered
    plan's, of two parts or more) picks the keys' values, in `keys` order, from the
    parts' values one after the other.
    """
    if len(parts) == 1:  # one shard: the caller's own task makes the round trip
        try:
            return list(await parts[0][0].call(requests[0]))
        except asyncio.CancelledError:
            _gave_up(names, None)
            raise
    fanin = Fanin(len(parts))
    for index, ((coalescer, _), request) in enumerate(zip(parts, requests, strict=True)):
        coalescer.add(request, fanin, index)
    try:
        results = await fanin.future
    except asyncio.CancelledError:
        _gave_up(names, fanin)
        raise
    return _gathered(keys, parts, results, order)


def _gave_up(names: Sequence[str], fanin: Fanin | None) -> None:
    """The read of this context gave up waiting on `names` (each part of `fanin`, when
    given): its `ReadWatch`, if any, keeps them for the `ReadTimeout`."""
    watch = READ_WATCH.get()
    if watch is not None:
        watch.waiting_on(names, fanin)


def _gathered(
    keys: Sequence[bytes],
    parts: list[Part],
    results: list[Any],
    order: Callable[[list[bytes | None]], Sequence[bytes | None]] | None,
) -> list[bytes | None]:
    """The keys' values, in order, from their parts' (the first part that failed raises)."""
    if order is not None:
        flat: list[bytes | None] = []
        for values in results:
            if isinstance(values, BaseException):
                raise values
            flat += values
        if len(flat) == len(keys):  # (else the loop below raises as it always did)
            return list(order(flat))
    out: list[bytes | None] = [None] * len(keys)
    for (_, positions), values in zip(parts, results, strict=True):
        if isinstance(values, BaseException):
            raise values
        for pos, value in zip(positions, values, strict=True):
            out[pos] = value
    return out


WritePlan = tuple[list[Part], list[list[int]]]
"""A write's parts, and each part's positions (`write_parts`'s `parts` and `positions`)."""


def write_plan(
    plans: dict[tuple[bytes, ...], WritePlan],
    keys: Sequence[bytes],
    partition: Callable[[Sequence[bytes]], dict[int, list[int]]],
    coalescers: Sequence[Coalescer[Any, Any]],
) -> WritePlan:
    """The parts of a write of `keys`: shard index -> positions (`partition`), each with
    its shard's coalescer, and the positions alone. Remembered in `plans` by key tuple
    (a group's keys are written again and again) where a key lives never changes
    (fixed shards); the lists are read only (`write_parts` keeps them as they are)."""
    plan = plans.get(keys) if type(keys) is tuple else None
    if plan is None:
        parts = [(coalescers[s], positions) for s, positions in partition(keys).items()]
        plan = (parts, [positions for _, positions in parts])
        if type(keys) is tuple:
            if len(plans) >= PLANS_MAX:
                plans.clear()
            plans[keys] = plan
    return plan


def requests_of(keys: Sequence[bytes], parts: list[Part]) -> list[list[bytes]]:
    """Each part's keys, for `fetch_parts`."""
    return [[keys[p] for p in positions] for _, positions in parts]


_FetchPlan = tuple[
    list[Part],
    list[str],
    list[list[bytes]],
    Callable[[list[bytes | None]], Sequence[bytes | None]] | None,
]


def _order(parts: list[Part]) -> Callable[[list[bytes | None]], Sequence[bytes | None]] | None:
    """`fetch_parts`'s `order` for a plan of two parts or more (else None)."""
    if len(parts) < 2:
        return None
    flat = [p for _, positions in parts for p in positions]
    where = dict(zip(flat, range(len(flat)), strict=True))
    return itemgetter(*[where[i] for i in range(len(flat))])


class FetchPlans:
    """`fetch_parts` for a topology whose routing never changes (`Shards`): the plan
    of a tuple of keys (its parts, their shard names and each part's keys) is made
    once by `plan(keys)` and kept, up to `limit` tuples (then it starts again)."""

    __slots__ = ("_limit", "_plan", "_plans")

    def __init__(
        self, plan: Callable[[Sequence[bytes]], tuple[list[Part], list[str]]], limit: int = 4096
    ) -> None:
        self._plan = plan
        self._plans: dict[tuple[bytes, ...], _FetchPlan] = {}
        self._limit = limit

    def fetch(self, keys: Sequence[bytes]) -> Coroutine[Any, Any, list[bytes | None]]:
        """`fetch_parts(keys, ...)` by the plan of `keys`."""
        plan = self._plans.get(keys) if type(keys) is tuple else None
        if plan is None:
            parts, names = self._plan(keys)
            plan = (parts, names, requests_of(keys, parts), _order(parts))
            if type(keys) is tuple:
                if len(self._plans) >= self._limit:
                    self._plans.clear()
                self._plans[keys] = plan
        return fetch_parts(keys, *plan)


async def write_parts(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    parts: list[Part],
    positions: list[list[int]],
    stamp: GuardStamp,
    slots: Sequence[int] = (),
    floors: Topology | None = None,
) -> WriteOutcome:
    """Guarded-write every key through its shard's coalescer; per-shard failures kept.

    Every part is queued at once and the answers come back with one wake-up (`Fanin`).
    `positions` are the parts' (`write_plan`); `stamp` is the write's (`write_guarded`'s
    keywords, as the dict they came in). A key whose floor the guard could not raise
    gets it raised through `floors` before the outcome returns (`_floor`).
    """
    requests = requests_for(keys, values, positions, slots, stamp)
    fanin = Fanin(len(parts), keep=True)
    for index, (coalescer, mine) in enumerate(parts):
        coalescer.add(requests[index], fanin, index, len(mine))  # its size: its keys
    try:
        results = await fanin.future
    except asyncio.CancelledError:
        # The calls went, and may land: a floor the guard left to the client is raised
        # all the same before the cancellation goes on (never a delete without it),
        # where one may be left: a cluster's (a slot migrating), or a key's the client
        # names (else the cancellation goes on at once, as it always did)
        if floors is not None and (floors.slot_bound or _named(floors, keys)):
            await carried(_late(requests, fanin, stamp, floors))
        raise
    outcome = _collected(requests, results)
    if floors is not None and needs_floors(outcome.results.values(), floors):
        await raise_floors(floors, outcome, stamp)
    return outcome


def _named(topology: Topology, keys: Sequence[bytes]) -> bool:
    """Whether the guard may leave a floor of `keys` to the client (`client_named`)."""
    return any(client_named(topology, key) for key in keys)


def _collected(requests: list[WriteRequest], results: list[Any]) -> WriteOutcome:
    """The outcome of a write's `requests` from their results (one per request)."""
    outcome = WriteOutcome()
    done = outcome.results
    for request, codes in zip(requests, results, strict=True):
        if not isinstance(codes, BaseException):
            done.update(zip(request.keys, codes, strict=True))
        elif isinstance(codes, ShardError):
            outcome.failed.update(dict.fromkeys(request.keys, codes))
        else:
            raise codes
    return outcome


async def _late(
    requests: list[WriteRequest], fanin: Fanin, stamp: GuardStamp, floors: Topology | None
) -> None:
    """A cancelled write's calls, to their end: the floors its guard left to the client
    are raised once they answer (what else they did is the caller's no longer)."""
    outcome = _collected(requests, await fanin.rest())
    if floors is not None and needs_floors(outcome.results.values(), floors):
        await raise_floors(floors, outcome, stamp)
