"""What a scenario runs on: the servers (`Env`), how long (`Timing`), and its `Run`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from stampede.testing import LocalCluster, LocalPrimaries, RedisNode
from stampede.topology._cluster import Cluster
from stampede.topology._shards import Shards
from stampede.typing import RepairStrategy, Topology

from .faults import FaultyTopology
from .history import History
from .workload import CHAOS_CONNECTION, Layout

__all__ = ["FAST", "LONG", "Env", "Run", "Timing"]


@dataclass(frozen=True)
class Timing:
    """How long and how wide a run is."""

    duration: float
    groups: int
    kill_down: float = 1.0
    pause: float = 1.5


FAST = Timing(duration=2.5, groups=12)
LONG = Timing(duration=20.0, groups=40)


@dataclass
class Env:
    """The servers of one topology, from `stampede.testing`."""

    kind: str
    servers: LocalPrimaries | LocalCluster

    @property
    def cluster(self) -> LocalCluster | None:
        return self.servers if isinstance(self.servers, LocalCluster) else None

    def topology(self) -> Topology:
        if isinstance(self.servers, LocalCluster):
            return Cluster(self.servers.url, options=CHAOS_CONNECTION)
        return Shards(self.servers.urls, options=CHAOS_CONNECTION)

    def node(self, shard: str) -> RedisNode:
        return next(n for n in self.servers.nodes if n.address == shard)

    def worker_args(self) -> list[str]:
        if isinstance(self.servers, LocalCluster):
            return ["--cluster", "--url", self.servers.url]
        return [arg for url in self.servers.urls for arg in ("--url", url)]

    def reset(self) -> None:
        """Heal (resume, restart, finish migrations) and empty every server."""
        self.servers.heal()
        self.servers.flushall()


@dataclass
class Run:
    """One scenario on one topology, as its body sees it."""

    env: Env
    timing: Timing
    history: History
    topology: FaultyTopology
    layout: Layout
    workdir: Path
    notes: list[str] = field(default_factory=list)
    extra_histories: list[Path] = field(default_factory=list)
    settle_repair: RepairStrategy | None = None  # default: CHAOS_REPAIR
    cleanup: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
