"""The sweep: collect version hashes of keys that are no longer written.

A commit collects its own key's version hash as it goes, so a key written
again and again keeps only what the grace window asks for. A key written once
more and then left alone keeps the version it replaced until something collects
it: `sweep` walks every shard with SCAN for version hashes and collects each, so
after the grace window every key is back to its current version alone. The
repair worker runs it periodically; it can also be called directly.
"""

from __future__ import annotations

from ..errors import ShardResponseError
from ..topology.base import Topology
from .scripts import COLLECT

__all__ = ["sweep"]

_PATTERNS = (b"*:stampede:v", b"*:stampede:v:u", b"stampede:v:{*")


async def sweep(topology: Topology, *, grace: float = 5.0, count: int = 500) -> int:
    """Collect every version hash on every shard; returns how many were visited."""
    grace_ms = max(1, round(grace * 1000))
    visited = 0
    for shard in topology.shard_names:
        for pattern in _PATTERNS:
            cursor = b"0"
            while True:
                cursor, found = await topology.execute_on(
                    shard, "SCAN", cursor, "MATCH", pattern, "COUNT", count, "TYPE", "hash"
                )
                for side in found:
                    visited += await _collect(topology, side, grace_ms)
                if cursor in (b"0", 0, "0"):
                    break
    return visited


async def _collect(topology: Topology, side: bytes, grace_ms: int) -> int:
    key = await topology.execute(side, "HGET", side, "k")
    if key is None:
        return 0
    try:
        await topology.script(COLLECT, [key, side], [grace_ms])
    except ShardResponseError:  # the data key holds another type now: leave it
        return 0
    return 1
