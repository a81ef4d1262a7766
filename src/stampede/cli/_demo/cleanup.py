"""Everything the demo writes, found and deleted: on servers it does not own (`--url`,
`--sentinel`) it leaves them holding exactly what they held before.

Its keys are the entities' (`stampede-demo:user:1:profile`, ...) and what stampede
keeps beside them: commit records (`<group>:stampede:commit`), kept versions
(`{<key>}:stampede:p:u`), its repair stream `{stampede-demo}:repairs` with its
markers, retries and dead letters, and operation markers in the stream's slot.
Every one of them starts with one of `PATTERNS`; no shard identity record is
written (the demo connects to servers it does not own with `check_identity` off).
"""

from __future__ import annotations

import asyncio
from typing import Any

from stampede.typing import Topology

from .keyspace import PREFIX

__all__ = ["PATTERNS", "demo_keys", "remove_demo_keys"]

PATTERNS = (
    f"{PREFIX}:*",  # the entities, their commit records and version keys
    "{" + PREFIX + "*",  # kept versions of untagged keys; the repair stream and its keys
    "stampede:op:{" + PREFIX + "}*",  # operation markers of the stream's commands
)
"""SCAN MATCH globs that cover every key the demo writes, and nothing else."""


async def demo_keys(topology: Topology) -> list[bytes]:
    """Every key of the demo's on every shard (SCAN, so the servers stay responsive)."""
    found: list[bytes] = []
    for shard in topology.shard_names:
        for pattern in PATTERNS:
            cursor: Any = 0
            while True:
                cursor, keys = await topology.execute_on(
                    shard, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000
                )
                found.extend(keys)
                if int(cursor) == 0:
                    break
    return found


async def remove_demo_keys(topology: Topology) -> int:
    """Delete every key of the demo's (an earlier run's too); how many there were."""
    doomed = sorted(set(await demo_keys(topology)))
    limit = asyncio.Semaphore(64)

    async def unlink(key: bytes) -> int:
        async with limit:
            return int(await topology.execute(key, "UNLINK", key))

    return sum(await asyncio.gather(*(unlink(k) for k in doomed)))
