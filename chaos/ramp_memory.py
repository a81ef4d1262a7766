"""Memory pressure for the `ramp-evict` scenario: a small `maxmemory` on every primary, an
eviction policy, and a filler writing big plain keys.

`Squeeze.apply(policy)` sets `maxmemory` to what each primary uses now plus `headroom`
bytes (`maxmemory-samples 2`, so the keys evicted are close to a random pick and the
workload's own keys go too); `release()` puts back what it found. The filler's keys
expire (EX 30), so `volatile-lru` has something to evict besides the workload's
expiring keys, tombstones and version hashes.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from stampede.errors import StampedeError
from stampede.typing import Topology

__all__ = ["FILL_BYTES", "Squeeze", "filler"]

FILL_BYTES = 64 * 1024
_SETTINGS = ("maxmemory", "maxmemory-policy", "maxmemory-samples")


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


async def _info(topology: Topology, shard: str, section: str) -> dict[str, str]:
    text = _text(await topology.execute_on(shard, "INFO", section))
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {name: value.strip() for name, value in pairs}


@dataclass
class Squeeze:
    """A small `maxmemory` on every primary of `topology`, undone by `release`."""

    topology: Topology
    headroom: int = 4 * 1024 * 1024
    saved: dict[str, list[str]] = field(default_factory=dict)

    async def apply(self, policy: str) -> None:
        for shard in self.topology.shard_names:
            if shard not in self.saved:
                got = [await self.topology.execute_on(shard, "CONFIG", "GET", s) for s in _SETTINGS]
                self.saved[shard] = [_text(reply[1]) for reply in got]
            used = int((await _info(self.topology, shard, "memory"))["used_memory"])
            await self.topology.execute_on(
                shard, "CONFIG", "SET", "maxmemory", used + self.headroom,
                "maxmemory-policy", policy, "maxmemory-samples", 2,
            )  # fmt: skip

    async def policy(self, policy: str) -> None:
        for shard in self.topology.shard_names:
            await self.topology.execute_on(shard, "CONFIG", "SET", "maxmemory-policy", policy)

    async def evicted(self) -> int:
        """Keys evicted so far on every primary (INFO stats, since the server started)."""
        total = 0
        for shard in self.topology.shard_names:
            total += int((await _info(self.topology, shard, "stats"))["evicted_keys"])
        return total

    async def release(self) -> None:
        for shard, values in list(self.saved.items()):
            args = [a for pair in zip(_SETTINGS, values, strict=True) for a in pair]
            await self.topology.execute_on(shard, "CONFIG", "SET", *args)
            del self.saved[shard]


async def filler(topology: Topology, until: float, tally: collections.Counter[str]) -> None:
    """Plain 64 KB keys (`fill:<n>`, EX 30) as fast as the servers take them, until `until`;
    refused writes (OOM) are counted in `tally["fill_refused"]`."""
    blob = b"x" * FILL_BYTES
    n = 0
    while time.monotonic() < until:
        n += 1
        key = b"fill:%d" % n
        try:
            await topology.execute(key, "SET", key, blob, "EX", 30)
        except StampedeError:
            tally["fill_refused"] += 1
            await asyncio.sleep(0.01)
        else:
            tally["filled"] += 1
        if n % 8 == 0:
            await asyncio.sleep(0.002)  # leave the event loop to the workload
