"""The failover scenarios: real failovers under a recorded workload, then the checker.

| scenario            | servers                             | fault                               |
| ------------------- | ----------------------------------- | ----------------------------------- |
| `failover-graceful` | cluster, 3 masters with a replica   | `CLUSTER FAILOVER` on a replica     |
| `failover-kill`     | each, node timeout 1 s              | SIGKILL a master; restarted, it     |
|                     |                                     | rejoins as a replica                |
| `failover-stop`     |                                     | SIGSTOP a master until its replica  |
|                     |                                     | is promoted, then SIGCONT           |
| `failover-lossy`    |                                     | cut a replica's link, let its master|
|                     |                                     | take writes, SIGKILL it, `CLUSTER   |
|                     |                                     | FAILOVER TAKEOVER` on the replica   |
| `sentinel-kill`     | 2 Sentinel services (a primary and  | SIGKILL a primary; Sentinel         |
|                     | a replica each), 3 Sentinels        | promotes its replica                |
| `sentinel-lossy`    | the same                            | the same, its replica's link cut    |
|                     |                                     | while the primary takes writes      |

A run: reset the servers; start the workload (`failover_workload`: plain and durable
group writers, group readers, transactions, `read_atomic` readers); once it has
`warm` writes acknowledged, fail over the shard of a tagged group (and thus a part of
every spread group and of the transaction keys); wait for the promotion, the old
primary back as a replica, a group write on that shard acknowledged, and `tail` more
writes; stop the workload, `settle` every group, read every transaction key once more,
and judge the history with `check_failover`. Every wait is for an event (a role, a
count of acknowledged writes), bounded only to fail a stuck run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .failover_checker import FailoverReport, check_failover
from .failover_env import EVENT_TIMEOUT, FailoverServers, ReplicatedCluster, SentinelPrimaries
from .failover_workload import FailoverWorkload, TrackingTopology, failover_layout, ramp_keys_on
from .history import History, text
from .workload import Layout, settle

__all__ = [
    "FAILOVER_FAST",
    "FAILOVER_LONG",
    "FAILOVER_SCENARIOS",
    "FailoverRun",
    "FailoverScenario",
    "FailoverTiming",
    "run_failover",
]


@dataclass(frozen=True)
class FailoverTiming:
    """How wide a run is: groups, and acknowledged group writes before and after."""

    groups: int
    warm: int
    tail: int


FAILOVER_FAST = FailoverTiming(groups=8, warm=40, tail=80)
FAILOVER_LONG = FailoverTiming(groups=16, warm=400, tail=2000)


@dataclass(frozen=True)
class FailoverScenario:
    name: str
    title: str
    topology: str  # "cluster" | "sentinel"
    fault: str  # what `FailoverServers.inject` does

    def servers(self) -> FailoverServers:
        return ReplicatedCluster() if self.topology == "cluster" else SentinelPrimaries()


FAILOVER_SCENARIOS: tuple[FailoverScenario, ...] = (
    FailoverScenario("failover-graceful", "CLUSTER FAILOVER on a replica", "cluster", "graceful"),
    FailoverScenario("failover-kill", "a cluster master SIGKILLed", "cluster", "kill"),
    FailoverScenario("failover-stop", "a cluster master SIGSTOPped, resumed", "cluster", "stop"),
    FailoverScenario("failover-lossy", "writes lost to a takeover", "cluster", "lossy"),
    FailoverScenario("sentinel-kill", "a Sentinel-managed primary SIGKILLed", "sentinel", "kill"),
    FailoverScenario("sentinel-lossy", "writes lost to a Sentinel failover", "sentinel", "lossy"),
)  # fmt: skip


@dataclass
class FailoverRun:
    """What a run produced (the fields the chaos tables read, as `ScenarioRun`'s)."""

    scenario: str
    topology: str
    report: FailoverReport
    seconds: float
    history_path: Path | None
    notes: list[str] = field(default_factory=list)
    torn_at_end: list[str] = field(default_factory=list)
    leaked: dict[str, int] = field(default_factory=dict)


def _merged(plain: Layout, durable: Layout) -> Layout:
    return Layout({**plain.groups, **durable.groups}, {**plain.modes, **durable.modes})


async def _until(what: str, ready: Callable[[], bool], clients: asyncio.Task[None]) -> None:
    """Wait until `ready()`; raise what the workload raised if it ended first."""
    deadline = time.monotonic() + EVENT_TIMEOUT
    while not ready():
        if clients.done():
            clients.result()
            raise RuntimeError(f"the workload ended before {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not seen in {EVENT_TIMEOUT:g} s")
        await asyncio.sleep(0.02)


async def run_failover(
    scenario: FailoverScenario,
    servers: FailoverServers,
    timing: FailoverTiming = FAILOVER_FAST,
    *,
    workdir: Path,
    suffix: str = "",
) -> FailoverRun:
    """Reset `servers`, run `scenario` once, settle and check; the history goes to
    `<workdir>/<scenario><suffix>.jsonl`."""
    await servers.reset()
    path = workdir / f"{scenario.name}{suffix}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    history = History(path)
    topology = TrackingTopology(servers.topology())
    started = time.monotonic()
    notes: list[str] = []
    try:
        await topology.open()
        plain, durable = failover_layout(topology, timing.groups)
        key = plain.groups[plain.tagged()[0]][0].encode()
        shard = topology.shard_of(key)
        keys = [
            *plain.keys_on(topology, shard),
            *durable.keys_on(topology, shard),
            *ramp_keys_on(topology, shard),
        ]
        affected = {text(k) for k in keys}
        workload = FailoverWorkload(topology, plain, durable, history)
        clients = asyncio.create_task(workload.run())
        try:
            await _until("warm-up", lambda: workload.acked_since(started) >= timing.warm, clients)
            at = time.monotonic()
            fault = await servers.inject(scenario.fault, topology, key, keys, history)
            await _until(
                "a write on the failed-over shard",
                lambda: workload.acked_since(at, affected) >= 1,
                clients,
            )
            after = time.monotonic()
            await _until("the tail", lambda: workload.acked_since(after) >= timing.tail, clients)
        finally:
            workload.stop.set()
            await asyncio.gather(clients, return_exceptions=True)
        clients.result()  # a client that raised: not an error any call may raise
        notes.append(
            f"{scenario.fault} of {fault.shard}: {fault.promoted.address} promoted, "
            f"{fault.victim.address} back as its replica; {len(affected)} workload keys there"
        )
        if workload.leaked:
            notes.append(f"errors that are not StampedeError: {dict(workload.leaked)}")
            notes += workload.traces.values()
        torn = await settle(topology, _merged(plain, durable), history)
        await workload.final_atomic_reads()
    finally:
        with contextlib.suppress(Exception):
            await topology.aclose()
        history.close()
    seconds = time.monotonic() - started
    history.dump(path)
    report = check_failover(history.events)
    return FailoverRun(
        scenario.name,
        servers.kind,
        report,
        seconds,
        path,
        notes,
        torn,
        dict(workload.leaked),
    )
