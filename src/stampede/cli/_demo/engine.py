"""Run the demo: seed the keyspace, load it with faults, sweep, drain the repairs, scan.

```python
summary = await run_demo(urls, config=DemoConfig(size=100, duration=3))
assert summary.torn_left == 0
```

Phases: *seeding* writes every entity once; *running* starts concurrent writers
(one at a time per entity, as a service owning each entity would), readers that
judge every read and hand torn groups to their entity's repair strategy, the
crash injector (a `fault_rate` share of writes die between shards) and, on local
servers, a pauser that SIGSTOPs one primary for a moment; *sweeping* reads every
entity once more, as the application's traffic eventually would; *draining*
waits until the in-process worker has emptied the repair stream; *scanning*
walks every shard with `scan_groups` and counts the torn groups left.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from stampede._client import Stampede
from stampede._connect import connect
from stampede._kept import drop_kept
from stampede.errors import ConfigurationError, PartialWriteError, StampedeError
from stampede.options import ConnectOptions, RetryPolicy
from stampede.repair._queue import RepairQueue
from stampede.repair._strategies import Enqueue, NewestWins, Refetch
from stampede.repair._worker import Worker
from stampede.scan import scan_groups
from stampede.testing.node import RedisNode
from stampede.typing import RepairStrategy
from stampede.verdict import Mode

from .cleanup import remove_demo_keys
from .faults import crash_write, pause_primaries, spans_shards
from .keyspace import GROUP_PATTERN, MATCH, PREFIX, Database, Entity, entities, payloads
from .stats import STRATEGIES, Counters, Summary, worker_events

__all__ = ["DEMO_STREAM", "Demo", "DemoConfig", "run_demo"]

READ_RETRY = RetryPolicy(attempts=6, base_delay=0.002, max_delay=0.05, deadline=0.3)
LOCAL_CONNECTION = ConnectOptions(socket_timeout=0.25, connect_timeout=0.5, connection_retries=1)
# Against servers the demo does not own, its jobs go to a stream of their own, so
# its worker never takes (and "repairs" from the demo database) jobs of yours.
DEMO_STREAM = b"{%s}:repairs" % PREFIX.encode()
DRAIN_TIMEOUT = 30.0

Watch = Callable[["Demo"], AbstractAsyncContextManager[object]]


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """How big, how long and how faulty a demo run is."""

    size: int = 200
    duration: float = 10.0
    fault_rate: float = 0.05
    strategies: tuple[str, ...] = STRATEGIES
    mode: Mode = Mode.COMMIT
    writers: int = 6
    readers: int = 6
    pause_every: float | None = None  # default: a third of the duration, at least 1 s
    pause_for: float = 0.4
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.size < 1 or self.duration < 0 or not 0 <= self.fault_rate <= 1:
            raise ConfigurationError("need size >= 1, duration >= 0 and 0 <= fault_rate <= 1")
        unknown = set(self.strategies) - set(STRATEGIES)
        if not self.strategies or unknown:
            raise ConfigurationError(f"strategies must be among {', '.join(STRATEGIES)}")


class Demo:
    """One demo run over an open `Stampede` (see the module docstring for the phases)."""

    def __init__(
        self,
        st: Stampede,
        config: DemoConfig,
        *,
        nodes: Sequence[RedisNode] = (),
        local: bool = True,
    ) -> None:
        self.st = st
        self.config = config
        self.nodes = list(nodes)
        self.local = local
        self.counters = Counters()
        self.db = Database()
        self.rng = random.Random(config.seed)
        self.entities = entities(config.size)
        self.spanning = [e for e in self.entities if spans_shards(st, e)]
        # A fifth of the entities takes most of the writes, as in real traffic; the
        # crash injector picks any entity whose keys span shards.
        self.hot = self.rng.sample(self.entities, max(1, config.size // 5))
        self.locks = {e.group: asyncio.Lock() for e in self.entities}
        if local:
            self.queue = RepairQueue(st.topology, min_idle=5.0)
        else:
            self.queue = RepairQueue(st.topology, name=DEMO_STREAM, partitions=1, min_idle=5.0)
        built: dict[str, RepairStrategy] = {
            "newest-wins": NewestWins(),
            "refetch": Refetch(self.db.load),
            "enqueue": Enqueue(self.queue),
        }
        # Entities take turns through the chosen strategies, users and orders alike.
        names = [config.strategies[i % len(config.strategies)] for i in range(config.size)]
        self.assigned = {
            e.group: (name, built[name]) for e, name in zip(self.entities, names, strict=True)
        }
        self.worker = Worker(
            st.topology,
            self.queue,
            Refetch(self.db.load),
            concurrency=4,
            consumer="stampede-demo",
            mode=config.mode,
            versions=st.versions,
            poll_interval=0.05,
            block_ms=100,
            grace=2.0,
        )
        self.phase = "starting"
        self.started = time.monotonic()
        self.load_started: float | None = None

    @property
    def elapsed(self) -> float:
        """Seconds of the running phase so far (0 before it starts)."""
        return 0.0 if self.load_started is None else time.monotonic() - self.load_started

    async def run(self) -> Summary:
        """Every phase in turn; the summary says how many torn groups are left."""
        with worker_events(self.counters):
            await remove_demo_keys(self.st.topology)  # an interrupted run's leftovers
            self.phase = "seeding"
            await self._each(self.entities, self._seed)
            worker = asyncio.create_task(self.worker.run())
            try:
                self.phase = "running"
                await self._load()
                await self._tear_one_per_strategy()
                self.phase = "sweeping"
                # A write torn at the very end reads as its group's last whole write
                # until its kept versions expire: sweep after the grace window.
                await asyncio.sleep(self.st.options.version_grace)
                await self._each(self.entities, self._sweep)
                self.phase = "draining"
                await self._drain()
            finally:
                self.worker.stop()
                await worker
        self.phase = "scanning"
        report = await scan_groups(
            self.st.topology, GROUP_PATTERN, match=MATCH, mode=self.config.mode
        )
        self.phase = "done"
        w = self.worker.stats
        return Summary(
            topology="cluster" if self.st.topology.slot_bound else "shards",
            servers=list(self.st.topology.shard_names),
            local=self.local,
            mode=self.config.mode.value,
            size=self.config.size,
            duration=self.config.duration,
            fault_rate=self.config.fault_rate,
            strategies=list(self.config.strategies),
            counters=self.counters,
            worker={
                "done": w.done,
                "repaired": w.repaired,
                "rolled_forward": w.rolled_forward,
                "already_consistent": w.already_consistent,
                "lost_races": w.lost_races,
                "failed": w.failed,
                "dead_lettered": w.dead_lettered,
            },
            scan={
                "groups": report.groups,
                "consistent": report.consistent,
                "not_found": report.not_found,
            },
            torn_left=len(report.torn),
            seconds=time.monotonic() - self.started,
            left_groups=[t.group.decode() for t in report.torn[:20]],
        )

    # -- phases ------------------------------------------------------------------------

    async def _each(self, todo: Sequence[Entity], fn: Callable[[Entity], Awaitable[None]]) -> None:
        limit = asyncio.Semaphore(32)

        async def one(entity: Entity) -> None:
            async with limit:
                await fn(entity)

        await asyncio.gather(*(one(e) for e in todo))

    async def _seed(self, entity: Entity) -> None:
        values = payloads(entity, self.db.next_revision(entity.group), self.rng)
        self.db.put(entity.group, values)
        await self.st.write(entity.group, values)
        self.counters.writes += 1

    async def _load(self) -> None:
        stop = asyncio.Event()
        rng = random.Random(self.rng.random())
        tasks = [
            asyncio.create_task(self._writer(stop, rng.random()))
            for _ in range(self.config.writers)
        ]
        tasks += [
            asyncio.create_task(self._reader(stop, rng.random()))
            for _ in range(self.config.readers)
        ]
        if self.nodes:
            every = self.config.pause_every or max(1.0, self.config.duration / 3)
            tasks.append(
                asyncio.create_task(
                    pause_primaries(
                        self.nodes,
                        stop,
                        self.counters,
                        rng,
                        every=every,
                        pause_for=self.config.pause_for,
                    )
                )
            )
        self.load_started = time.monotonic()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.config.duration)
        finally:
            stop.set()
            done = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _tear_one_per_strategy(self) -> None:
        """Tear one group of each chosen strategy as the load ends: however few
        crashes a short or slow run injected, the sweep then shows every strategy
        repairing (the load's crashes land on entities at random)."""
        for strategy in self.config.strategies:
            entity = next((e for e in self.spanning if self.assigned[e.group][0] == strategy), None)
            if entity is None:  # (no entity of this strategy spans shards)
                continue
            async with self.locks[entity.group]:
                with contextlib.suppress(StampedeError):  # (a shard paused: skipped)
                    await crash_write(self.st, entity, self.db, self.rng, self.counters)

    async def _writer(self, stop: asyncio.Event, seed: float) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            entity = rng.choice(self.hot if rng.random() < 0.8 else self.entities)
            crash = bool(self.spanning) and rng.random() < self.config.fault_rate
            if crash:
                entity = rng.choice(self.spanning)
            async with self.locks[entity.group]:
                try:
                    if crash:
                        await crash_write(self.st, entity, self.db, rng, self.counters)
                    else:
                        await self._write(entity, rng)
                except PartialWriteError as exc:
                    # Like a crash (faults.crash_write): the writer gave up longer ago
                    # than the grace window, so readers see the tear, not the kept write.
                    with contextlib.suppress(StampedeError):
                        await drop_kept(self.st.topology, list(exc.landed))
                    self.counters.writes_failed += 1
                    self.counters.note(
                        f"partial write: {entity.group} landed {len(exc.landed)} of "
                        f"{len(exc.landed) + len(exc.failed)} keys (shard {exc.shard} silent)"
                    )
                except StampedeError as exc:
                    self.counters.writes_failed += 1
                    self.counters.note(f"write failed: {entity.group}: {type(exc).__name__}")
            await asyncio.sleep(rng.uniform(0, 0.004))

    async def _write(self, entity: Entity, rng: random.Random) -> None:
        values = payloads(entity, self.db.next_revision(entity.group), rng)
        self.db.put(entity.group, values)  # the source of truth first, then the cache
        await self.st.write(entity.group, values)
        self.counters.writes += 1

    async def _reader(self, stop: asyncio.Event, seed: float) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            await self._read(rng.choice(self.entities))
            await asyncio.sleep(rng.uniform(0, 0.004))

    async def _read(self, entity: Entity) -> bool:
        name, strategy = self.assigned[entity.group]
        try:
            result = await self.st.read(
                entity.group, entity.keys, retry=READ_RETRY, repair=strategy
            )
        except StampedeError as exc:
            self.counters.count_failed_read(entity.group, exc)
            return False
        self.counters.count_read(name, result)
        # Done when whole, or handed to the worker; a repair that lost a race to a
        # late write (a paused primary applying it after resuming) reads again.
        return result.consistent or result.queued

    async def _sweep(self, entity: Entity) -> None:
        for attempt in range(5):
            if await self._read(entity):
                return
            await asyncio.sleep(0.05 * 2**attempt)

    async def _drain(self) -> None:
        """Wait until the worker has emptied the repair stream (or DRAIN_TIMEOUT)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            stats = await self.queue.stats()
            if stats["length"] == 0 and stats["pending"] == 0:
                return
            await asyncio.sleep(0.05)
        self.counters.note("the repair stream did not drain in time; the scan will tell")


async def run_demo(
    urls: Sequence[str] = (),
    *,
    cluster: bool = False,
    config: DemoConfig | None = None,
    nodes: Sequence[RedisNode] = (),
    local: bool = False,
    watch: Watch | None = None,
    sentinels: Sequence[str] = (),
    services: Sequence[str] = (),
    data_url: str | None = None,
) -> Summary:
    """Connect, run a `Demo`, close. `nodes` are primaries the demo may pause.

    `local=True` says the servers belong to the demo (fast timeouts, the default
    repair stream); otherwise (the user's servers, by URL or Sentinel) every key the
    demo wrote is deleted at the end, whatever happened, and no shard identity record
    is written. `watch(demo)` is an async context manager around the run, for a live
    display.
    """
    config = config or DemoConfig()
    connection = LOCAL_CONNECTION if local else ConnectOptions(check_identity=False)
    # A short grace window: a write torn by an injected fault reads as the last whole
    # write only briefly, then as torn, so the demo shows detection and repair.
    where: dict[str, Any] = (
        {"sentinels": list(sentinels), "services": list(services), "data_url": data_url}
        if sentinels
        else {"urls": list(urls), "cluster": cluster}
    )
    async with connect(**where, mode=config.mode, connection=connection, version_grace=0.2) as st:
        demo = Demo(st, config, nodes=nodes, local=local)
        try:
            if watch is None:
                summary = await demo.run()
            else:
                async with watch(demo):
                    summary = await demo.run()
        except BaseException:
            if not local:  # the user's servers: leave them as they were, failing or not
                with contextlib.suppress(StampedeError):
                    await remove_demo_keys(st.topology)
            raise
        if not local:
            summary.removed = await remove_demo_keys(st.topology)
        return summary
