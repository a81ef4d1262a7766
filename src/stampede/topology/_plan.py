"""Scatter a group's keys over per-shard coalescers and gather the answers in order.

Both topologies split a plan into (coalescer, positions) parts, one per shard or
node; these two functions do the rest the same way for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import ShardError
from ._base import WriteOutcome
from ._coalesce import Coalescer
from ._guard import KEEP_MS, WriteRequest

__all__ = ["Part", "fetch_parts", "write_parts"]

Part = tuple[Coalescer[Any, Any], list[int]]


async def fetch_parts(keys: Sequence[bytes], parts: list[Part]) -> list[bytes | None]:
    """GET every key through its shard's coalescer; the first failing shard raises."""
    if len(parts) == 1 and len(parts[0][1]) == len(keys):
        return list(await parts[0][0].call(list(keys)))
    results = await _scatter(parts, [[keys[p] for p in positions] for _, positions in parts])
    out: list[bytes | None] = [None] * len(keys)
    for (_, positions), values in zip(parts, results, strict=True):
        if isinstance(values, BaseException):
            raise values
        for pos, value in zip(positions, values, strict=True):
            out[pos] = value
    return out


async def write_parts(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    parts: list[Part],
    *,
    version: int,
    token: str,
    expire_at_ms: int | None,
    limit: int = 0,
    keep_ms: int = KEEP_MS,
    slots: Sequence[int] = (),
) -> WriteOutcome:
    """Guarded-write every key through its shard's coalescer; per-shard failures kept."""
    requests = [
        WriteRequest.build(
            keys,
            values,
            positions,
            version=version,
            token=token,
            expire_at_ms=expire_at_ms,
            limit=limit,
            keep_ms=keep_ms,
            slots=slots,
        )
        for _, positions in parts
    ]
    results = await _scatter(parts, requests)
    outcome = WriteOutcome()
    for request, codes in zip(requests, results, strict=True):
        if isinstance(codes, ShardError):
            outcome.failed.update(dict.fromkeys(request.keys, codes))
        elif isinstance(codes, BaseException):
            raise codes
        else:
            outcome.results.update(zip(request.keys, codes, strict=True))
    return outcome


async def _scatter(parts: list[Part], requests: Sequence[Any]) -> list[Any]:
    """Each part's result or exception, all parts at once.

    Every part but the last is submitted (its round trip starts in a task); the
    last runs in this task (`Coalescer.call`), which saves a task and a loop turn
    when its shard is idle.
    """
    futures = [c.submit(r) for (c, _), r in zip(parts[:-1], requests[:-1], strict=True)]
    try:
        last: Any = await parts[-1][0].call(requests[-1])
    except ShardError as exc:
        last = exc
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    rest = await asyncio.gather(*futures, return_exceptions=True) if futures else []
    return [*rest, last]
