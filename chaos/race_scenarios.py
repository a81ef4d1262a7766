"""Race scenarios: repairs from PostgreSQL racing late and retried writes; deletes and expiry.

| scenario         | what races                                                        |
| ---------------- | ----------------------------------------------------------------- |
| `refetch`        | cache-aside writers (the row first, then Redis with `version=` the |
|                  | row's version) crashing, held back (`delay`) and retried with the |
|                  | same stamp (`retry`), against readers repairing with `Refetch`    |
| `refetch-newest` | the same writers, readers repairing with `NewestWins(rebuild=...)` |
| `refetch-worker` | the same writers, readers queueing, the worker repairing with     |
|                  | `Refetch`; worker 1 is SIGKILLed half way, worker 2 takes over    |
| `delete`         | deletes (`st.delete`, and rows deleted at the source that a       |
|                  | `Refetch` turns into a delete) and 150 ms TTLs racing held and    |
|                  | retried older writes                                              |

Every write of a database group is one row update (`pg.Table`) whose version
orders the Redis write; one in seven dies after the row update, before Redis,
so a repair may load a write that never reached Redis (its payloads name it).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

from stampede._client import Stampede
from stampede.errors import StampedeError
from stampede.repair._queue import RepairQueue
from stampede.repair._strategies import Enqueue
from stampede.results import RepairOutcome
from stampede.typing import RepairContext, RepairStrategy
from stampede.verdict import Observation, Verdict

from .env import Run
from .faults import CrashPoint, CrashStyle, EveryNth, InjectedCrash
from .history import CURRENT_OP, load_events, payload_of
from .pg import Table, dsn
from .recording import CHAOS_REPAIR, RecordingStampede
from .worker_scenario import (
    drain,
    repairs_done,
    scan_and_enqueue,
    start_worker,
    stop_workers,
    until,
)
from .workload import Workload, WorkloadConfig

__all__ = ["LATE_AFTER", "STYLES", "TTL", "ByGroup", "RaceWorkload", "delete", "refetch"]

STYLES = (CrashStyle.RAISE, CrashStyle.DELAY, CrashStyle.RETRY, CrashStyle.CANCEL)
"""The crash plan cycles through these: dead writers, held parts, retried calls."""
LATE_AFTER = 0.5
"""Seconds a held part or a retried call waits: longer than a read's retry deadline (0.3 s),
so readers see the group torn and repair it first."""
TTL = 0.15
"""Seconds the expiring groups' writes live: shorter than `LATE_AFTER`."""
PG_WORKER_STRATEGY = "chaos.pg:worker_strategy"


class ByGroup:
    """A repair strategy per group (database groups refetch, the others `NewestWins`)."""

    name = "by-group"
    fills_missing = False

    def __init__(self, strategies: Mapping[str, RepairStrategy], default: RepairStrategy) -> None:
        self.strategies = dict(strategies)
        self.default = default

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        group = obs.group.decode("utf-8", "backslashreplace")
        return await self.strategies.get(group, self.default).repair(ctx, obs, verdict)


@dataclass
class RaceWorkload(Workload):
    """`Workload` whose writers go through the database for `db_groups`, write `ttl_groups`
    with a TTL, and delete a share of the time."""

    table: Table | None = None
    db_groups: frozenset[str] = frozenset()
    ttl_groups: frozenset[str] = frozenset()
    delete_share: float = 0.0
    db_crash_every: int = 7
    _db_ops: int = field(default=0, init=False)

    async def _incarnation(self, st: Stampede, process: str, rng: random.Random) -> None:
        rst = RecordingStampede(st, self.history, process=process)
        seq = 0
        while not self.stop.is_set():
            group = rng.choice(self._writable())
            seq += 1
            try:
                if self.delete_share and rng.random() < self.delete_share:
                    await self._delete(rst, process, seq, group)
                else:
                    await self._write(rst, process, seq, group)
            except StampedeError:
                await asyncio.sleep(0.01)

    def _dies(self) -> bool:
        self._db_ops += 1
        return bool(self.db_crash_every) and self._db_ops % self.db_crash_every == 0

    def _died(self, group: str, what: str) -> InjectedCrash:
        ctx = CURRENT_OP.get()
        self.history.fault(
            "crash", point=what, style="raise", group=group, write=None if ctx is None else ctx.op
        )
        return InjectedCrash(CrashPoint.BEFORE_FIRST_SHARD)

    async def _write(self, rst: RecordingStampede, process: str, seq: int, group: str) -> None:
        keys = self.layout.groups[group]
        values = {k: payload_of(process, seq, k) for k in keys}
        mode = self.layout.modes[group]
        if group not in self.db_groups or self.table is None:
            ttl = TTL if group in self.ttl_groups else None
            await rst.write(group, values, mode=mode, ttl=ttl)
            return
        table, dies = self.table, self._dies()

        async def row() -> int:
            version = await table.write(group, f"{process}:{seq}")
            if dies:
                raise self._died(group, "after-database")
            return version

        await rst.write(group, values, mode=mode, before=row)

    async def _delete(self, rst: RecordingStampede, process: str, seq: int, group: str) -> None:
        keys = self.layout.groups[group]
        mode = self.layout.modes[group]
        if group not in self.db_groups or self.table is None:
            await rst.delete(group, keys, mode=mode)
            return
        version = await self.table.delete(group, f"{process}:{seq}")
        if self._dies():
            raise self._died(group, "after-database-delete")
        await rst.delete(group, keys, mode=mode, version=version)


async def _table(run: Run) -> Table:
    table = Table(dsn())
    await table.create()
    run.cleanup += [table.drop, table.aclose]
    return table


def _plan(run: Run) -> None:
    run.topology.plan = EveryNth(3, styles=STYLES)
    run.topology.late_after = LATE_AFTER


def _late_note(run: Run) -> str:
    injected = run.topology.injected
    return (
        f"crash points {sum(injected[p.value] for p in CrashPoint)}, held parts "
        f"{injected['delay']}, retried calls {injected['retry']}"
    )


async def refetch(run: Run, *, readers: str = "refetch") -> None:
    """Cache-aside writers crashing, held and retried; readers repair (`refetch`, `newest`)."""
    table = await _table(run)
    _plan(run)
    run.settle_repair = table.refetch()
    repair = table.refetch() if readers == "refetch" else CHAOS_REPAIR
    workload = RaceWorkload(
        run.topology,
        run.layout,
        run.history,
        WorkloadConfig(repair=repair, seed=11),
        table=table,
        db_groups=frozenset(run.layout.groups),
    )
    await workload.run(run.timing.duration)
    run.notes.append(f"{_late_note(run)}; readers repair with {repair.name}")


async def refetch_newest(run: Run) -> None:
    await refetch(run, readers="newest")


async def refetch_worker(run: Run) -> None:
    """Readers queue; the worker refetches from the table; worker 1 dies half way."""
    table = await _table(run)
    _plan(run)
    run.settle_repair = table.refetch()
    queue = RepairQueue(run.topology)
    await queue.clear()
    env = {"STAMPEDE_CHAOS_PG_TABLE": table.name, "STAMPEDE_CHAOS_PG_DSN": table.url}
    first = await start_worker(run, "worker1", delay=0.1, strategy=PG_WORKER_STRATEGY, env=env)
    workers = [first]

    async def repaired() -> bool:
        return repairs_done(run.extra_histories[0]) >= 1

    async def fault() -> None:
        await asyncio.sleep(run.timing.duration / 2)
        await until(repaired, run.timing.duration)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        run.history.fault("worker-kill", worker="worker1")
        workers.append(
            await start_worker(run, "worker2", delay=0.0, strategy=PG_WORKER_STRATEGY, env=env)
        )

    try:
        workload = RaceWorkload(
            run.topology,
            run.layout,
            run.history,
            WorkloadConfig(repair=Enqueue(queue), seed=13),
            table=table,
            db_groups=frozenset(run.layout.groups),
        )
        await workload.run(run.timing.duration, fault())
        await run.topology.drain()
        queued = await scan_and_enqueue(run, queue)
        stats = await drain(run, queue)
        done = sum(repairs_done(p) for p in run.extra_histories)
        run.notes.append(
            f"{_late_note(run)}; scan enqueued {queued}; dead letters {stats['dead']}; "
            f"repairs by the workers {done}"
        )
    finally:
        await stop_workers(workers)
    for path in run.extra_histories:
        run.history.extend(load_events(path))


async def delete(run: Run) -> None:
    """Deletes and expiry racing held and retried older writes.

    Half the groups are database groups (written and deleted through the table,
    one op in five a delete, repaired with `Refetch`: a row deleted at the source
    becomes a guarded delete); the other half are written with a 150 ms TTL and
    deleted one op in ten, with clock versions, repaired with `NewestWins`.
    """
    table = await _table(run)
    _plan(run)
    names = list(run.layout.groups)
    db_groups = frozenset(names[0::2])
    ttl_groups = frozenset(names[1::2])
    refetch_ = table.refetch()
    strategy = ByGroup(dict.fromkeys(db_groups, refetch_), CHAOS_REPAIR)
    run.settle_repair = strategy
    workload = RaceWorkload(
        run.topology,
        run.layout,
        run.history,
        WorkloadConfig(repair=strategy, seed=17),
        table=table,
        db_groups=db_groups,
        ttl_groups=ttl_groups,
        delete_share=0.15,
    )
    await workload.run(run.timing.duration)
    with contextlib.suppress(Exception):
        await run.topology.drain()
    run.notes.append(
        f"{_late_note(run)}; database groups {len(db_groups)}, expiring groups "
        f"{len(ttl_groups)} (ttl {TTL:g} s)"
    )
