"""The repair worker: drains the repair stream with a strategy, at a bounded concurrency.

It claims jobs (new ones, retries whose delay is over, then ones whose worker
died), re-reads each group, leaves groups that are whole again alone, repairs the
rest with its strategy and acks. A failing job is put back with an exponential,
jittered delay (`RetryBackoff`) and, after `max_attempts`, dead-lettered with its
last error. On stop (SIGTERM/SIGINT in the CLI) it takes no new jobs, lets the
jobs in hand finish within a grace period and hands back the rest.

A strategy may have start-up and shutdown hooks (`StrategyLifecycle`: async
`on_startup()` and `on_shutdown()`, both optional): `run` awaits `on_startup()`
before the first claim and `on_shutdown()` after the last job, in the worker's
own event loop, so a database pool opened there is opened once and closed on stop.

Logs go through `logging` (logger `stampede.worker`): the message is the event
name (`job.done`, ...) followed by `key=value` pairs, and every field is also on
the record as a structured `extra` attribute (`record.event`, `record.group`,
...), never a payload. `stampede worker --log-format json` prints one JSON object
per line from those attributes.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import CollectorRegistry, Histogram

from .. import _pipeline as pipeline
from .. import metrics, tracing
from ..errors import InvalidKeyError, RepairError, StampedeError
from ..options import check_count, check_seconds
from ..results import RepairAction
from ..typing import DEFAULT_GRACE, RepairContext, RepairStrategy, Topology, VersionSource
from ..verdict import Mode, Status, judge
from ..versions import HybridClock
from . import _worker_record as _record
from ._queue import Job, RepairQueue
from ._queue_admin import held_by, keep_held
from ._worker_loops import check_settings, consumer_name, forget_loop, sweep_loop
from ._worker_record import event, follow_up
from ._worker_stats import (
    RetryBackoff,
    StrategyLifecycle,
    WorkerCollector,
    WorkerStats,
    ping_shards,
    serve_metrics,
)

__all__ = ["RetryBackoff", "StrategyLifecycle", "Worker", "WorkerStats", "serve_metrics"]


class Worker:
    """Drains a `RepairQueue` with a `RepairStrategy`.

    `backoff` spaces the retries of a failing job (`RetryBackoff(base=0)` retries at
    once). `burst=True` stops by itself once the queue has nothing left for it:
    no job to claim, none in hand and no retry waiting. `registry` is the
    `prometheus_client` registry its metrics go to (a new one by default).
    `job_timeout` bounds one attempt at a job (a hung loader): past it the attempt
    fails and is retried, then dead-lettered, as any failure (None or 0: no limit).
    """

    def __init__(
        self,
        topology: Topology,
        queue: RepairQueue,
        strategy: RepairStrategy,
        *,
        concurrency: int = 4,
        consumer: str | None = None,
        mode: Mode = Mode.STAMP,
        versions: VersionSource | None = None,
        ttl: float | None = None,
        poll_interval: float = 0.2,
        block_ms: int = 500,
        health_interval: float = 15.0,
        grace: float = 10.0,
        backoff: RetryBackoff | None = None,
        burst: bool = False,
        registry: CollectorRegistry | None = None,
        sweep_interval: float = 60.0,
        version_grace: float = 5.0,
        job_timeout: float | None = 60.0,
        tombstone_grace: float = DEFAULT_GRACE,
    ) -> None:
        check_settings(
            concurrency=concurrency, poll_interval=poll_interval, block_ms=block_ms,
            health_interval=health_interval, grace=grace, version_grace=version_grace,
            job_timeout=job_timeout, tombstone_grace=tombstone_grace,
        )  # fmt: skip
        self.topology, self.queue, self.strategy = topology, queue, strategy
        self.concurrency = check_count(concurrency, "concurrency")
        self.consumer = consumer_name(consumer)
        self.mode = mode
        self.versions = versions or HybridClock()
        self.ttl = ttl
        self.poll_interval = check_seconds(poll_interval, "poll_interval")
        self.block_ms = check_count(block_ms, "block_ms", 0)
        self.health_interval = check_seconds(health_interval, "health_interval", zero=False)
        self.grace = check_seconds(grace, "grace")
        self.backoff = backoff if backoff is not None else RetryBackoff()
        self.burst = burst
        self.sweep_interval = check_seconds(sweep_interval, "sweep_interval")
        self.version_grace = check_seconds(version_grace, "version_grace", zero=False)
        self.job_timeout = check_seconds(job_timeout or 0, "job_timeout") or None
        self.tombstone_grace = check_seconds(tombstone_grace, "tombstone_grace", zero=False)
        self.stats = WorkerStats()
        self.stopping = asyncio.Event()
        self._now = asyncio.Event()  # stop(now=True): no grace for the jobs in hand
        self._in_hand: set[asyncio.Task[None]] = set()
        self._held: dict[str, Job] = {}  # kept from looking idle (`keep_held`)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(WorkerCollector(self.stats))
        self._job_seconds = Histogram(
            "stampede_worker_job_seconds",
            "Seconds from claim to ack (or failure) per job, by outcome.",
            ["outcome"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )

    def stop(self, *, now: bool = False) -> None:
        """Take no new jobs; `run` returns once the jobs in hand are finished or released.
        With `now` (a second Ctrl-C), the jobs in hand get no more of the grace period:
        they are cancelled and handed back at once (even during the grace of a stop)."""
        self.stopping.set()
        if now:
            self._now.set()

    async def run(self) -> WorkerStats:
        """Work until `stop()` (or, with `burst`, until the queue is drained); returns the
        final counters. The strategy's `on_startup`/`on_shutdown` hooks bracket the work."""
        await self._startup()
        try:
            await self._work()
        finally:
            await self._shutdown()
        return self.stats

    async def _startup(self) -> None:
        hook = getattr(self.strategy, "on_startup", None)
        if hook is None:
            return
        try:
            await hook()
        except Exception as exc:
            raise StampedeError(
                f"the strategy {self.strategy.name!r} failed to start: {type(exc).__name__}: {exc}"
            ) from exc
        event("strategy.started", strategy=self.strategy.name)

    async def _shutdown(self) -> None:
        hook = getattr(self.strategy, "on_shutdown", None)
        if hook is None:
            return
        try:
            await hook()
        except Exception as exc:  # as a failed start: one clear error, not a traceback
            raise StampedeError(
                f"the strategy {self.strategy.name!r} failed to shut down: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        event("strategy.stopped", strategy=self.strategy.name)

    async def _work(self) -> None:
        event(
            "worker.start",
            consumer=self.consumer,
            strategy=self.strategy.name,
            concurrency=self.concurrency,
            partitions=self.queue.partitions,
            burst=self.burst,
        )
        health = asyncio.create_task(self._health_loop())
        sweeping = asyncio.create_task(
            sweep_loop(self.topology, self.sweep_interval, self.version_grace)
        )
        forgetting = asyncio.create_task(forget_loop(self.queue))
        touching = asyncio.create_task(
            keep_held(self.queue, self.consumer, lambda: list(self._held.values()))
        )
        stop = asyncio.ensure_future(self.stopping.wait())  # (ended with the others below)
        idle = self.poll_interval
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(self._in_hand)
                if free <= 0:  # full: wait for a job to finish, or for stop()
                    await asyncio.wait({*self._in_hand, stop}, return_when=asyncio.FIRST_COMPLETED)
                    continue
                jobs = await self._claim(free)
                if jobs is None:  # failed (logged, waited): not a sign of a drained queue
                    continue
                if not jobs:
                    if self.burst and not self._in_hand and await self._drained():
                        event("worker.drained", consumer=self.consumer)
                        break
                    await self._sleep(idle)
                    idle = min(idle * 2, 2.0)
                    continue
                idle = self.poll_interval
                self.stats.claimed += len(jobs)
                for job in jobs:
                    if self.stopping.is_set():
                        await self._release(job)
                        continue
                    self._held[job.id] = job  # in hand from now: no claim returns it again
                    task = asyncio.create_task(self._process(job))
                    self._in_hand.add(task)
                    self.stats.in_hand = len(self._in_hand)
                    task.add_done_callback(self._done)
        finally:
            await self._drain()
            for background in (health, sweeping, touching, forgetting, stop):
                background.cancel()
            await self._check_queue()
            event("worker.stop", consumer=self.consumer, **self.stats.counts())

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_hand.discard(task)
        self.stats.in_hand = len(self._in_hand)

    async def _drained(self) -> bool:
        """Burst mode: nothing to claim now, no retry waiting for its delay, and no job
        held under this worker's name that it is not working on (a claim that failed
        half-way, or an earlier process of the same name: taken over after min_idle)."""
        try:
            stats = await self.queue.stats(detailed=True)
            stranded = await held_by(self.queue, self.consumer)
        except StampedeError:
            return False
        return stats["lag"] == 0 and stats["delayed"] == 0 and stranded == 0

    async def _claim(self, count: int) -> list[Job] | None:
        try:
            return await self.queue.claim(
                self.consumer, count, block_ms=self.block_ms, in_hand=list(self._held)
            )
        except InvalidKeyError:  # a queue key of another type: no retry mends it
            raise
        except Exception as exc:  # a worker outlives a bad shard or a bad reply
            self.stats.error("claim")
            event("worker.claim_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            await self._sleep(1.0)
            return None

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _drain(self) -> None:
        if not self._in_hand:
            return
        in_hand = set(self._in_hand)
        finished = asyncio.ensure_future(asyncio.wait(in_hand))
        hurry = asyncio.ensure_future(self._now.wait())  # stop(now=True) ends the grace
        try:
            first = asyncio.FIRST_COMPLETED
            await asyncio.wait({finished, hurry}, timeout=self.grace, return_when=first)
        finally:
            finished.cancel()
            hurry.cancel()
        pending = [task for task in in_hand if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _release(self, job: Job) -> None:
        try:
            if await self.queue.release(job, self.consumer):
                self.stats.released += 1
        except StampedeError as exc:  # it stays pending and is reclaimed after min_idle
            self.stats.error("release")
            event("job.release_failed", logging.WARNING, job=job.id, error=str(exc))

    async def _process(self, job: Job) -> None:
        group = job.group.decode("utf-8", "backslashreplace")
        started = time.perf_counter()
        outcome = "failed"
        self._held[job.id] = job
        try:
            if not job.keys:
                outcome = await _record.dead(self, job, job.last_error or "malformed job entry")
                return
            if job.deliveries > self.queue.max_attempts:
                died = f"its worker died {job.deliveries - 1} times while repairing it"
                outcome = await _record.dead(self, job, died)
                return
            with tracing.span("repair_job", group=group, job=job.id) as traced:
                try:
                    outcome = await asyncio.wait_for(self._repair(job, group), self.job_timeout)
                except TimeoutError:  # a hung loader: retried, then dead-lettered
                    raise RepairError(
                        group, f"the repair took longer than the job timeout ({self.job_timeout} s)"
                    ) from None
                traced.set(action=outcome)
        except asyncio.CancelledError:
            outcome = "released"
            await self._release(job)
            raise
        except Exception as exc:  # any failure is recorded on the job, never fatal
            outcome = await _record.failed(self, job, group, exc)
        finally:
            self._held.pop(job.id, None)
            self._job_seconds.labels(outcome=outcome).observe(time.perf_counter() - started)

    async def _repair(self, job: Job, group: str) -> str:
        mode = Mode(job.mode) if job.mode in ("stamp", "commit") else self.mode
        obs = await pipeline.observe(self.topology, job.group, job.keys, mode)
        verdict = judge(obs)
        if verdict.status in (Status.CONSISTENT, Status.NOT_FOUND):
            done_id = await self.queue.ack(job)
            self.stats.finished(RepairAction.ALREADY_CONSISTENT)
            metrics.repair(RepairAction.ALREADY_CONSISTENT.value, "worker")
            event(
                "job.done",
                job=job.id,
                group=group,
                action="already_consistent",
                **follow_up(done_id),
            )
            return "already_consistent"
        if _record.in_flight(job, obs):  # a writer the job's read never waited for
            raise _record.InFlight(obs.seen())
        grace, version_grace = self.tombstone_grace, self.version_grace
        ctx = RepairContext(self.topology, mode, self.versions, self.ttl, grace, version_grace)
        outcome = await pipeline.repair(self.strategy, ctx, obs, verdict, source="worker")
        if outcome.action is RepairAction.LOST_RACE:
            self.stats.lost_races += 1
            event("job.lost_race", logging.DEBUG, job=job.id, group=group)
            if not outcome.consistent and "undecided" in outcome.detail:
                raise _record.Undecided(outcome.detail["undecided"])
            if not outcome.consistent:
                raise StampedeError("a newer write raced the repair and the group is still torn")
        elif outcome.action is RepairAction.QUEUED:
            raise StampedeError("the worker's strategy only re-queues; give it a real strategy")
        done_id = await self.queue.ack(job)
        done = self.stats.finished(outcome.action)
        event(
            "job.done",
            job=job.id,
            group=group,
            action=outcome.action.value,
            reason=job.reason,
            attempts=job.attempts,
            deliveries=job.deliveries,
            **follow_up(done_id),
        )
        return done

    async def _check_queue(self) -> None:
        try:
            stats = await self.queue.stats(detailed=True)
        except StampedeError as exc:
            self.stats.error("queue_stats")
            event("worker.queue_unreachable", logging.WARNING, error=str(exc))
            return
        self.stats.queue_gauges(stats)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            await self._check_queue()
            event(
                "worker.health",
                consumer=self.consumer,
                in_hand=len(self._in_hand),
                **self.stats.counts(),
            )

    async def check_health(self, ping_timeout: float = 2.0) -> tuple[bool, dict[str, str]]:
        """PING every shard; (all answered, shard -> "ok" or the error). For `/healthz`."""
        return await ping_shards(self.topology, ping_timeout)
