"""The chaos scenarios: a workload, one kind of fault, a full repair, and the checker.

| scenario     | fault                                                         | topologies      |
| ------------ | ------------------------------------------------------------- | --------------- |
| `crash`      | every third write crashes, cycling through the crash points   | shards, cluster |
|              | and between raising and cancelling the writer's task          |                 |
| `kill`       | a primary is SIGKILLed and restarted empty (data loss)        | shards, cluster |
| `pause`      | a primary is SIGSTOPped past the socket timeout, then resumed | shards, cluster |
| `migrate`    | slots move to another master while writers and readers run    | cluster         |
| `worker`     | readers queue repairs; the worker process is SIGKILLed with   | shards, cluster |
|              | jobs in hand and another one finishes the queue               |                 |
| `skew`       | writers' hybrid clocks are offset by up to 1.5 s              | shards, cluster |
| `ramp`       | read-atomic transactions; writers cancelled and writer        | shards, cluster |
|              | processes SIGKILLed at every step of both rounds, a primary   |                 |
|              | paused, slots migrated (cluster); judged by `check_ramp`      |                 |
| `ramp-delete`| transactions with `tx.delete` and 0.05-0.5 s TTLs, cancelled  | shards, cluster |
|              | at every step; one-key `st.delete`s; 0.2 s tombstone and      |                 |
|              | version grace; the sweep every 0.25 s (`ramp_edges`)          |                 |
| `ramp-lost-  | COMMIT calls failing before or after running, on every shard  | shards, cluster |
| commit`      | (or one shard, or once) for half the transactions             |                 |
| `ramp-repair`| whole-group transactions cancelled and SIGKILLed at every     | shards, cluster |
|              | COMMIT step; group reads repairing with `NewestWins`          |                 |
| `ramp-evict` | `ramp-delete` under a small `maxmemory`, a filler of big keys,| shards, cluster |
|              | `allkeys-lru` then `volatile-lru`                             |                 |

The failover scenarios (`failover_scenarios`: `failover-graceful`, `failover-kill`,
`failover-stop`, `failover-lossy` on a cluster with replicas, `sentinel-kill` and
`sentinel-lossy` on Sentinel-managed primaries) run real failovers on servers of
their own and are judged by `check_failover`; `python -m chaos` runs them after
these (`failover_runner`).

The four `ramp-*` edge scenarios are judged by `ramp_edge_checker.check_edges`
(fractured reads, deleted or expired values coming back, acknowledged transactions
lost, group reads mixing writes) with the rules each one's faults allow.

Each run ends with `settle` (every group repaired, then read once more) and
`check` over the whole history, the worker subprocesses' included.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from stampede.keys import keyslot

from .checker import CheckReport, check
from .env import FAST, LONG, Env, Run, Timing
from .failover_scenarios import FAILOVER_SCENARIOS
from .faults import EveryNth, FaultyTopology, kill_and_restart, migrate_slot, pause_and_resume
from .history import Event, History
from .race_scenarios import delete, refetch, refetch_newest, refetch_worker
from .ramp_checker import check_ramp
from .ramp_edges import EDGE_CHECKERS, ramp_delete, ramp_evict, ramp_lost_commit, ramp_repair
from .ramp_scenario import ramp_scenario
from .recording import CHAOS_REPAIR
from .reply_scenarios import clock, lost_reply
from .worker_scenario import worker_scenario
from .workload import CHAOS_CONNECTION, Workload, WorkloadConfig, make_layout, plant_torn, settle

__all__ = [
    "FAILOVER_SCENARIOS",
    "FAST",
    "LONG",
    "RAMP_EDGE_SCENARIOS",
    "SCENARIOS",
    "Env",
    "Scenario",
    "ScenarioRun",
    "Timing",
    "run_scenario",
]

SKEW_MS = (0, 400, -400, 1500)


@dataclass
class ScenarioRun:
    """What a run produced: the checker's report and the figures of the table."""

    scenario: str
    topology: str
    report: CheckReport
    seconds: float
    history_path: Path | None
    notes: list[str]
    torn_at_end: list[str]


Body = Callable[[Run], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    topologies: tuple[str, ...]
    body: Body
    groups_factor: int = 1  # times `Timing.groups`
    checker: Callable[[list[Event]], CheckReport] = check  # judges the run's history


async def _crash(run: Run) -> None:
    """Every third write crashes at the next crash point, raised or cancelled.

    Half way through, writers leave the cold groups and each cold spread group gets
    one more write that dies (between shards; in commit mode before the record): it
    stays torn until a reader repairs it (rewrite, or roll forward).
    """
    run.topology.plan = EveryNth(3)
    cold_after = run.timing.duration / 2
    config = WorkloadConfig(cold_after=cold_after)
    workload = Workload(run.topology, run.layout, run.history, config)

    async def plant() -> None:
        await asyncio.sleep(cold_after + 0.2)
        cold_spread = [g for g in run.layout.groups if g in run.layout.cold and "{" not in g]
        await plant_torn(run.topology, run.layout, run.history, cold_spread, record=True)

    await workload.run(run.timing.duration, plant())
    injected = ", ".join(f"{p} {n}" for p, n in sorted(run.topology.injected.items()))
    run.notes.append(f"crashes injected: {injected}")


def _victim(run: Run) -> str:
    return run.topology.shard_names[1]


async def _kill(run: Run) -> None:
    """A primary is SIGKILLed a third of the way in and restarted empty a second later.

    The victim holds a cold tagged group: written only until just before the kill,
    all its keys on the victim, its last acknowledged writes are lost with it.
    """
    cold_tagged = [g for g in run.layout.tagged() if g in run.layout.cold]
    shard = run.topology.shard_of(run.layout.groups[cold_tagged[0]][0].encode())
    keys = run.layout.keys_on(run.topology, shard)
    at = run.timing.duration / 3

    async def fault() -> None:
        await asyncio.sleep(at)
        await kill_and_restart(
            run.env.node(shard),
            run.history,
            shard=shard,
            keys=keys,
            down=run.timing.kill_down,
            cluster=run.env.cluster,
        )

    config = WorkloadConfig(cold_after=at - 0.3)
    workload = Workload(run.topology, run.layout, run.history, config)
    await workload.run(run.timing.duration, fault())
    run.notes.append(
        f"killed {shard} ({len(keys)} workload keys lived there); cold groups "
        f"{', '.join(sorted(run.layout.cold))} written only until 0.3 s before the kill"
    )


async def _pause(run: Run) -> None:
    """A primary is SIGSTOPped for longer than the socket timeout, then resumed.

    The cold groups' last writes are made while it is paused: their keys on it
    time out, to be applied (or not) when it resumes.
    """
    shard = _victim(run)
    at = run.timing.duration / 3

    async def fault() -> None:
        await asyncio.sleep(at)
        await pause_and_resume(
            run.env.node(shard),
            run.history,
            shard=shard,
            paused=run.timing.pause,
            cluster=run.env.cluster,
        )

    config = WorkloadConfig(cold_after=at + 0.2)
    workload = Workload(run.topology, run.layout, run.history, config)
    await workload.run(run.timing.duration, fault())
    run.notes.append(
        f"paused {shard} for {run.timing.pause:g} s "
        f"(socket timeout {CHAOS_CONNECTION.socket_timeout:g} s)"
    )


async def _migrate(run: Run) -> None:
    """Three slots move to another master, one after another, key by key: the slots of
    a tagged commit group, a tagged stamp group, and a spread group's first key.

    While a slot migrates its keys are split between the two masters (ASK, and
    TRYAGAIN for a tagged group's atomic multi-key writes); every fourth write
    crashes, so repairs run mid-migration too.
    """
    cluster = run.env.cluster
    assert cluster is not None
    run.topology.plan = EveryNth(4)
    layout = run.layout
    spread = [g for g in layout.groups if g not in layout.tagged()]
    chosen = [layout.groups[g][0] for g in [*layout.tagged()[:2], *spread[:1]]]
    slots = list(dict.fromkeys(keyslot(k) for k in chosen))
    every = [k for shard in run.topology.shard_names for k in layout.keys_on(run.topology, shard)]
    moved: list[str] = []
    step = run.timing.duration / 20

    async def fault() -> None:
        for slot in slots:
            await asyncio.sleep(step)
            source = cluster.master_for_slot(slot)
            target = next(m for m in cluster.masters if m is not source)
            keys = [k for k in every if keyslot(k) == slot]
            seconds = await migrate_slot(
                cluster, run.history, slot=slot, target=target, keys=keys, step=step
            )
            moved.append(f"{slot} ({len(keys)} keys, {seconds:.2f} s)")

    workload = Workload(run.topology, run.layout, run.history)
    await workload.run(run.timing.duration, fault())
    run.notes.append(f"slots migrated key by key: {', '.join(moved)}")


async def _skew(run: Run) -> None:
    """Writers' hybrid clocks run up to 1.5 s apart; every fifth write crashes."""
    run.topology.plan = EveryNth(5)
    config = WorkloadConfig(clock_offsets_ms=SKEW_MS, cold_after=run.timing.duration / 2)
    workload = Workload(run.topology, run.layout, run.history, config)
    await workload.run(run.timing.duration)
    kept_out = sum(
        1
        for e in run.history.events
        if e["type"] == "ok" and e.get("f") == "write" and e.get("superseded")
    )
    run.notes.append(
        f"clock offsets {', '.join(f'{o:+d}' for o in SKEW_MS)} ms; "
        f"{kept_out} acknowledged writes found a newer stamp already stored (superseded)"
    )
    for offset in SKEW_MS:
        run.history.fault("skew", offset_ms=offset)


BOTH = ("shards", "cluster")
RACE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("refetch", "Refetch from PostgreSQL vs late and retried writes", BOTH, refetch),
    Scenario("refetch-newest", "NewestWins vs late and retried writes", BOTH, refetch_newest),
    Scenario("refetch-worker", "the worker's Refetch vs late writes", BOTH, refetch_worker, 2),
    Scenario("delete", "deletes and expiry vs late older writes", BOTH, delete),
    Scenario("lost-reply", "replies lost after the server executed", ("shards",), lost_reply),
    Scenario("clock", "clock skew, a clock a year ahead, poisoned versions", BOTH, clock),
    Scenario(
        "ramp",
        "read-atomic transactions: writers cancelled and SIGKILLed at every step, a primary "
        "paused, slots migrated",
        BOTH,
        ramp_scenario,
        checker=check_ramp,
    ),
)
"""The race scenarios (`race_scenarios`, `reply_scenarios`): not in the default run's
first six, but run by `python -m chaos` like the others."""

RAMP_EDGE_SCENARIOS: tuple[Scenario, ...] = tuple(
    Scenario(name, title, BOTH, body, checker=EDGE_CHECKERS[name])
    for name, title, body in (
        ("ramp-delete", "read-atomic transactions with deletes, short TTLs, st.delete and "
         "the sweep", ramp_delete),
        ("ramp-lost-commit", "read-atomic transactions whose COMMIT calls fail before or "
         "after running", ramp_lost_commit),
        ("ramp-repair", "whole-group transactions cut mid-commit, group reads repairing "
         "with NewestWins", ramp_repair),
        ("ramp-evict", "read-atomic transactions and deletes under maxmemory eviction",
         ramp_evict),
    )
)  # fmt: skip
"""The read-atomic edge scenarios (`ramp_edges`), judged by `check_edges`."""


def _fresh(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return path


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("crash", "writers crashed at every crash point", ("shards", "cluster"), _crash),
    Scenario("kill", "a primary killed and restarted empty", ("shards", "cluster"), _kill),
    Scenario("pause", "a primary paused past the socket timeout", ("shards", "cluster"), _pause),
    Scenario("migrate", "slots migrated under load", ("cluster",), _migrate),
    Scenario("worker", "repair worker killed mid-queue", ("shards", "cluster"), worker_scenario, 2),
    Scenario("skew", "clock skew between writers", ("shards", "cluster"), _skew),
    *RACE_SCENARIOS,
    *RAMP_EDGE_SCENARIOS,
)


async def run_scenario(
    scenario: Scenario,
    env: Env,
    timing: Timing = FAST,
    *,
    workdir: Path,
    suffix: str = "",
) -> ScenarioRun:
    """Reset the servers, run `scenario`, settle, and check the history.

    The history goes to `<workdir>/<scenario>-<topology><suffix>.jsonl`.
    """
    await asyncio.to_thread(env.reset)
    history_path = _fresh(workdir / f"{scenario.name}-{env.kind}{suffix}.jsonl")
    history = History(history_path)
    real = env.topology()
    faulty = FaultyTopology(real, history=history)
    started = time.monotonic()
    run: Run | None = None
    try:
        await faulty.open()
        layout = make_layout(faulty, timing.groups * scenario.groups_factor)
        run = Run(env, timing, history, faulty, layout, workdir)
        await scenario.body(run)
        faulty.plan = None
        await faulty.drain()
        repair = CHAOS_REPAIR if run.settle_repair is None else run.settle_repair
        torn = await settle(faulty, layout, history, repair=repair)
    finally:
        for cleanup in run.cleanup if run is not None else ():
            with contextlib.suppress(Exception):
                await cleanup()
        with contextlib.suppress(Exception):
            await faulty.aclose()
        history.close()
    seconds = time.monotonic() - started
    history.dump(history_path)
    report = scenario.checker(history.events)
    assert run is not None
    return ScenarioRun(scenario.name, env.kind, report, seconds, history_path, run.notes, torn)
