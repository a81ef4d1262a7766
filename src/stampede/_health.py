"""`Stampede.ping()`: is every shard there, and how far away? For health endpoints."""

from __future__ import annotations

import asyncio
import time

from .options import check_seconds
from .results import Health
from .typing import Topology

__all__ = ["ping"]


async def ping(topology: Topology, within: float) -> Health:
    """PING every shard at once, each within `within` seconds; never raises for a
    shard, only for a `within` that is no positive number (`ConfigurationError`: a NaN
    or negative one made every shard look down, or waited with no bound)."""
    within = check_seconds(within, "ping()'s within", zero=False)
    try:
        shards = list(topology.shard_names)
    except Exception as exc:  # a cluster whose slot map could not be loaded
        return Health({}, {"topology": f"{type(exc).__name__}: {exc}"})

    async def one(shard: str) -> float | str:
        started = time.perf_counter()
        try:
            await asyncio.wait_for(topology.execute_on(shard, "PING"), within)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return time.perf_counter() - started

    answers = await asyncio.gather(*(one(s) for s in shards))
    latency = {s: a for s, a in zip(shards, answers, strict=True) if isinstance(a, float)}
    errors = {s: a for s, a in zip(shards, answers, strict=True) if isinstance(a, str)}
    return Health(latency, errors)
