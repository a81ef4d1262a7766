"""The repair worker: drains the repair stream with a strategy, at a bounded concurrency.

It claims jobs (new ones, then ones whose worker died), re-reads each group,
leaves groups that are whole again alone, repairs the rest with its strategy and
acks; a failing job is retried and, after `max_attempts`, dead-lettered with its
last error. On stop (SIGTERM/SIGINT in the CLI) it takes no new jobs, lets the
jobs in hand finish within a grace period and hands back the rest.

Logs are JSON lines with event names, groups and counts, never payloads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import StampedeError
from ..observe import observe_group
from ..topology.base import Topology
from ..verdict import Mode, Status, judge
from ..versions import HybridClock, VersionSource
from .base import RepairAction, RepairContext, RepairStrategy
from .queue import Job, RepairQueue

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger("stampede.worker")


@dataclass
class WorkerStats:
    """Counters since the worker started (and the queue gauges of the last check)."""

    started_at: float = field(default_factory=time.time)
    claimed: int = 0
    done: int = 0
    repaired: int = 0
    rolled_forward: int = 0
    deleted: int = 0
    already_consistent: int = 0
    lost_races: int = 0
    failed: int = 0
    dead_lettered: int = 0
    released: int = 0
    queue_length: int = 0
    queue_pending: int = 0
    queue_lag: int = 0
    queue_dead: int = 0

    def as_dict(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items()}

    def prometheus(self) -> str:
        """The counters in the Prometheus text exposition format."""
        lines = []
        counters = (
            "claimed done repaired rolled_forward deleted already_consistent lost_races "
            "failed dead_lettered released"
        ).split()
        for name in counters:
            metric = f"stampede_worker_jobs_{name}_total"
            lines += [f"# TYPE {metric} counter", f"{metric} {getattr(self, name)}"]
        for name in ("length", "pending", "lag", "dead"):
            metric = f"stampede_repair_queue_{name}"
            lines += [f"# TYPE {metric} gauge", f"{metric} {getattr(self, 'queue_' + name)}"]
        lines += [
            "# TYPE stampede_worker_uptime_seconds gauge",
            f"stampede_worker_uptime_seconds {time.time() - self.started_at:.3f}",
        ]
        return "\n".join(lines) + "\n"


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event (JSON line): names and counts only, never payloads."""
    if log.isEnabledFor(level):
        log.log(level, json.dumps({"event": name, **fields}, default=str, sort_keys=True))


def _follow_up(job_id: str | None) -> dict[str, Any]:
    """The log field naming the job an ack added because the group was enqueued again."""
    return {} if job_id is None else {"follow_up": job_id}


class Worker:
    """Drains a `RepairQueue` with a `RepairStrategy`."""

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
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.topology = topology
        self.queue = queue
        self.strategy = strategy
        self.concurrency = concurrency
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.mode = mode
        self.versions = versions or HybridClock()
        self.ttl = ttl
        self.poll_interval = poll_interval
        self.block_ms = block_ms
        self.health_interval = health_interval
        self.grace = grace
        self.stats = WorkerStats()
        self.stopping = asyncio.Event()
        self._in_hand: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Take no new jobs; `run` returns once the jobs in hand are finished or released."""
        self.stopping.set()

    async def run(self) -> WorkerStats:
        """Work until `stop()`; returns the final counters."""
        event(
            "worker.start",
            consumer=self.consumer,
            strategy=self.strategy.name,
            concurrency=self.concurrency,
            partitions=self.queue.partitions,
        )
        health = asyncio.create_task(self._health_loop())
        idle = self.poll_interval
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(self._in_hand)
                if free <= 0:
                    await asyncio.wait(self._in_hand, return_when=asyncio.FIRST_COMPLETED)
                    continue
                jobs = await self._claim(free)
                if not jobs:
                    await self._sleep(idle)
                    idle = min(idle * 2, 2.0)
                    continue
                idle = self.poll_interval
                self.stats.claimed += len(jobs)
                for job in jobs:
                    if self.stopping.is_set():
                        await self._release(job)
                        continue
                    task = asyncio.create_task(self._process(job))
                    self._in_hand.add(task)
                    task.add_done_callback(self._in_hand.discard)
        finally:
            await self._drain()
            health.cancel()
            await self._check_queue()
            event("worker.stop", consumer=self.consumer, **self._counts())
        return self.stats

    async def _claim(self, count: int) -> list[Job]:
        try:
            return await self.queue.claim(self.consumer, count, block_ms=self.block_ms)
        except Exception as exc:  # a worker outlives a bad shard or a bad reply
            event("worker.claim_failed", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
            await self._sleep(1.0)
            return []

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _drain(self) -> None:
        if not self._in_hand:
            return
        _, pending = await asyncio.wait(self._in_hand, timeout=self.grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _release(self, job: Job) -> None:
        try:
            await self.queue.release(job)
            self.stats.released += 1
        except StampedeError as exc:  # it stays pending and is reclaimed after min_idle
            event("job.release_failed", logging.WARNING, job=job.id, error=str(exc))

    async def _process(self, job: Job) -> None:
        group = job.group.decode("utf-8", "backslashreplace")
        try:
            if not job.keys:
                await self._dead(job, job.last_error or "malformed job entry")
                return
            if job.deliveries > self.queue.max_attempts:
                await self._dead(
                    job, f"its worker died {job.deliveries - 1} times while repairing it"
                )
                return
            await self._repair(job, group)
        except asyncio.CancelledError:
            await self._release(job)
            raise
        except Exception as exc:  # any failure is recorded on the job, never fatal
            error = f"{type(exc).__name__}: {exc}"
            try:
                dead = await self.queue.fail(job, error)
            except StampedeError as again:
                event(
                    "job.fail_unrecorded", logging.ERROR, job=job.id, group=group, error=str(again)
                )
                return
            if dead:
                self.stats.dead_lettered += 1
                event("job.dead_lettered", logging.WARNING, job=job.id, group=group, error=error)
            else:
                self.stats.failed += 1
                event(
                    "job.failed",
                    logging.WARNING,
                    job=job.id,
                    group=group,
                    error=error,
                    attempts=job.attempts + 1,
                )

    async def _repair(self, job: Job, group: str) -> None:
        mode = Mode(job.mode) if job.mode in ("stamp", "commit") else self.mode
        obs = await observe_group(self.topology, job.group, job.keys, mode)
        verdict = judge(obs)
        if verdict.status in (Status.CONSISTENT, Status.NOT_FOUND):
            follow_up = await self.queue.ack(job)
            self.stats.already_consistent += 1
            self.stats.done += 1
            event(
                "job.done",
                job=job.id,
                group=group,
                action="already_consistent",
                **_follow_up(follow_up),
            )
            return
        ctx = RepairContext(self.topology, mode, self.versions, self.ttl)
        outcome = await self.strategy.repair(ctx, obs, verdict.exhausted())
        if outcome.action is RepairAction.LOST_RACE:
            self.stats.lost_races += 1
            if not outcome.consistent:
                raise StampedeError("a newer write raced the repair and the group is still torn")
        elif outcome.action is RepairAction.QUEUED:
            raise StampedeError("the worker's strategy only re-queues; give it a real strategy")
        follow_up = await self.queue.ack(job)
        self.stats.done += 1
        if outcome.action is RepairAction.REWRITTEN:
            self.stats.repaired += 1
        elif outcome.action is RepairAction.ROLLED_FORWARD:
            self.stats.rolled_forward += 1
        elif outcome.action is RepairAction.DELETED:
            self.stats.deleted += 1
        event(
            "job.done",
            job=job.id,
            group=group,
            action=outcome.action.value,
            reason=job.reason,
            attempts=job.attempts,
            deliveries=job.deliveries,
            **_follow_up(follow_up),
        )

    async def _dead(self, job: Job, error: str) -> None:
        follow_up = await self.queue.dead_letter(job, error)
        self.stats.dead_lettered += 1
        event(
            "job.dead_lettered",
            logging.WARNING,
            job=job.id,
            group=job.group.decode("utf-8", "backslashreplace"),
            error=error,
            **_follow_up(follow_up),
        )

    async def _check_queue(self) -> None:
        try:
            stats = await self.queue.stats()
        except StampedeError as exc:
            event("worker.queue_unreachable", logging.WARNING, error=str(exc))
            return
        self.stats.queue_length = stats["length"]
        self.stats.queue_pending = stats["pending"]
        self.stats.queue_lag = stats["lag"]
        self.stats.queue_dead = stats["dead"]

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            await self._check_queue()
            event(
                "worker.health",
                consumer=self.consumer,
                in_hand=len(self._in_hand),
                **self._counts(),
            )

    def _counts(self) -> dict[str, int]:
        s = self.stats
        return {
            "done": s.done,
            "repaired": s.repaired,
            "rolled_forward": s.rolled_forward,
            "already_consistent": s.already_consistent,
            "lost_races": s.lost_races,
            "failed": s.failed,
            "dead_lettered": s.dead_lettered,
            "queue_lag": s.queue_lag,
            "queue_pending": s.queue_pending,
        }


async def serve_metrics(stats: WorkerStats, port: int, host: str = "127.0.0.1") -> asyncio.Server:
    """A minimal HTTP endpoint answering every GET with the Prometheus text."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            body = stats.prometheus().encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
