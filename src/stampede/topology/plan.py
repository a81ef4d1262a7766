"""Scatter a group's keys over per-shard coalescers and gather the answers in order.

Both topologies split a plan into (coalescer, positions) parts, one per shard or
node; these two functions do the rest the same way for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import ShardError
from .base import WriteOutcome
from .coalesce import Coalescer
from .guard import WriteRequest

__all__ = ["Part", "fetch_parts", "write_parts"]

Part = tuple[Coalescer[Any, Any], list[int]]


async def fetch_parts(keys: Sequence[bytes], parts: list[Part]) -> list[bytes | None]:
    """GET every key through its shard's coalescer; the first failing shard raises."""
    if len(parts) == 1 and len(parts[0][1]) == len(keys):
        return list(await parts[0][0].submit(list(keys)))
    futures = [c.submit([keys[p] for p in positions]) for c, positions in parts]
    results = await asyncio.gather(*futures, return_exceptions=True)
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
    slots: Sequence[int] = (),
) -> WriteOutcome:
    """Guarded-write every key through its shard's coalescer; per-shard failures kept."""
    futures = [
        c.submit(
            WriteRequest.build(
                keys,
                values,
                positions,
                version=version,
                token=token,
                expire_at_ms=expire_at_ms,
                slots=slots,
            )
        )
        for c, positions in parts
    ]
    if len(futures) == 1:
        try:
            results: list[Any] = [await futures[0]]
        except ShardError as exc:
            results = [exc]
    else:
        results = await asyncio.gather(*futures, return_exceptions=True)
    outcome = WriteOutcome()
    for (_, positions), codes in zip(parts, results, strict=True):
        if isinstance(codes, ShardError):
            outcome.failed.update(dict.fromkeys([keys[p] for p in positions], codes))
        elif isinstance(codes, BaseException):
            raise codes
        else:
            outcome.results.update(zip([keys[p] for p in positions], codes, strict=True))
    return outcome
