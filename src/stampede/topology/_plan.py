"""Scatter a group's keys over per-shard coalescers and gather the answers in order.

Both topologies split a plan into (coalescer, positions) parts, one per shard or
node; these two functions do the rest the same way for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..errors import ShardError
from ._base import READ_WATCH, WriteOutcome
from ._coalesce import Coalescer, Fanin
from ._guard import requests_for

if TYPE_CHECKING:
    from ..typing import GuardStamp

__all__ = ["PLANS_MAX", "Part", "fetch_parts", "write_parts", "write_plan"]

Part = tuple[Coalescer[Any, Any], list[int]]
PLANS_MAX = 1 << 16
"""The most key tuples a topology keeps the write parts of (`write_plan`)."""


async def fetch_parts(
    keys: Sequence[bytes], parts: list[Part], names: Sequence[str]
) -> list[bytes | None]:
    """GET every key through its shard's coalescer; the first failing shard raises.

    The read's `ReadWatch` (in `READ_WATCH`), if any, knows the shards (`names`,
    in `parts` order) while their answers are out.
    """
    watch = READ_WATCH.get()
    if len(parts) == 1:  # one shard: the caller's own task makes the round trip
        if watch is None:
            return list(await parts[0][0].call(list(keys)))
        watch.waiting_on(names)
        try:
            values = await parts[0][0].call(list(keys))
        except asyncio.CancelledError:
            raise  # the read gave up: the shard stays named
        except BaseException:
            watch.answered()
            raise
        watch.answered()
        return list(values)
    fanin = Fanin(len(parts))
    for index, (coalescer, positions) in enumerate(parts):
        coalescer.add([keys[p] for p in positions], fanin, index)
    if watch is not None:
        watch.waiting_on(names, fanin)
    results = await fanin.future
    if watch is not None:
        watch.answered()
    out: list[bytes | None] = [None] * len(keys)
    for (_, positions), values in zip(parts, results, strict=True):
        if isinstance(values, BaseException):
            raise values
        for pos, value in zip(positions, values, strict=True):
            out[pos] = value
    return out


def write_plan(
    plans: dict[tuple[bytes, ...], list[Part]],
    keys: Sequence[bytes],
    partition: Callable[[Sequence[bytes]], dict[int, list[int]]],
    coalescers: Sequence[Coalescer[Any, Any]],
) -> list[Part]:
    """The parts of a write of `keys`: shard index -> positions (`partition`), each with
    its shard's coalescer. Remembered in `plans` by key tuple (a group's keys are
    written again and again) where a key lives never changes (fixed shards);
    the lists are read only (`write_parts` keeps them as they are)."""
    parts = plans.get(keys) if type(keys) is tuple else None
    if parts is None:
        parts = [(coalescers[s], positions) for s, positions in partition(keys).items()]
        if type(keys) is tuple:
            if len(plans) >= PLANS_MAX:
                plans.clear()
            plans[keys] = parts
    return parts


async def write_parts(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    parts: list[Part],
    *,
    slots: Sequence[int] = (),
    **stamp: Unpack[GuardStamp],
) -> WriteOutcome:
    """Guarded-write every key through its shard's coalescer; per-shard failures kept.

    Every part is queued at once and the answers come back with one wake-up (`Fanin`).
    """
    requests = requests_for(keys, values, [positions for _, positions in parts], slots, stamp)
    fanin = Fanin(len(parts))
    for index, part in enumerate(parts):
        part[0].add(requests[index], fanin, index)
    results = await fanin.future
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
