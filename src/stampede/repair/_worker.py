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
import os
import random
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import _pipeline as pipeline
from .. import metrics, tracing
from .._txn.sweep import sweep
from ..errors import ConfigurationError, StampedeError
from ..results import RepairAction
from ..topology.base import Topology
from ..typing import RepairContext, RepairStrategy, VersionSource
from ..verdict import Mode, Status, judge
from ..versions import HybridClock
from ._queue import Job, RepairQueue

__all__ = ["RetryBackoff", "StrategyLifecycle", "Worker", "WorkerStats", "serve_metrics"]

log = logging.getLogger("stampede.worker")


@runtime_checkable
class StrategyLifecycle(Protocol):
    """Optional start-up and shutdown hooks of a repair strategy.

    The worker awaits `on_startup()` in its own event loop before it claims a
    job, and `on_shutdown()` once the last job is finished or handed back
    (SIGTERM included). A strategy may have either one; neither is required.
    """

    async def on_startup(self) -> None: ...

    async def on_shutdown(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """How long a failed job waits before a worker may claim it again.

    The n-th retry (n = 1, 2, ...) waits `min(max_delay, base * factor**(n-1))`
    seconds, less a random part of up to `jitter` of it ("equal jitter" at 0.5):
    with the defaults 0.5-1 s, 1-2 s, 2-4 s, 4-8 s, so the five attempts of
    `max_attempts=5` span at least 7.5 s. `base=0` retries at once.
    """

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base < 0 or self.max_delay < 0:
            raise ConfigurationError("retry delays must not be negative")
        if self.factor < 1:
            raise ConfigurationError(f"the backoff factor must be at least 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be in 0..1, got {self.jitter}")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds before retry number `retry` (1 for the first)."""
        exponent = min(max(retry - 1, 0), 64)
        raw = min(self.max_delay, self.base * self.factor**exponent)
        draw = (rng or random).random()
        return raw * (1 - self.jitter * draw)


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
    in_hand: int = 0
    queue_length: int = 0
    queue_pending: int = 0
    queue_lag: int = 0
    queue_delayed: int = 0
    queue_dead: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    """Errors by kind: `claim` (the stream unreachable), `repair` (a job's attempt
    failed), `record` (a failure could not be recorded), `release`, `queue_stats`."""

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(self).items()}


_OUTCOMES = (
    "repaired rolled_forward deleted already_consistent failed dead_lettered released".split()
)
_ERROR_KINDS = ("claim", "repair", "record", "release", "queue_stats")


class WorkerCollector(Collector):
    """A `prometheus_client` collector reading a worker's `WorkerStats` at scrape time."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        s = self.stats
        claimed = CounterMetricFamily(
            "stampede_worker_jobs_claimed", "Jobs this worker claimed from the repair stream."
        )
        claimed.add_metric([], s.claimed)
        yield claimed
        jobs = CounterMetricFamily(
            "stampede_worker_jobs",
            "Jobs this worker finished, by outcome: repaired (rewritten), rolled_forward, "
            "deleted, already_consistent (done); failed (retried after a delay), "
            "dead_lettered, released (handed back on stop).",
            labels=["outcome"],
        )
        for outcome in _OUTCOMES:
            jobs.add_metric([outcome], getattr(s, outcome))
        yield jobs
        lost = CounterMetricFamily(
            "stampede_worker_lost_races", "Repairs a newer write beat (re-read, then retried)."
        )
        lost.add_metric([], s.lost_races)
        yield lost
        errors = CounterMetricFamily(
            "stampede_worker_errors",
            "Errors by kind: claim (the repair stream unreachable), repair (an attempt "
            "failed), record (a failure could not be written back), release, queue_stats.",
            labels=["kind"],
        )
        for kind in sorted({*_ERROR_KINDS, *s.errors}):
            errors.add_metric([kind], s.errors.get(kind, 0))
        yield errors
        in_hand = GaugeMetricFamily("stampede_worker_jobs_in_hand", "Jobs being repaired now.")
        in_hand.add_metric([], s.in_hand)
        yield in_hand
        gauges = {
            "length": "Jobs queued: stream entries plus delayed retries.",
            "pending": "Jobs claimed by a worker, not yet acked.",
            "lag": "Stream entries not yet delivered to any worker.",
            "delayed": "Retries waiting for their backoff delay.",
            "dead": "Entries in the dead-letter stream.",
        }
        for name, text in gauges.items():
            gauge = GaugeMetricFamily(
                f"stampede_repair_queue_{name}", f"{text} (refreshed every health interval)"
            )
            gauge.add_metric([], getattr(s, "queue_" + name))
            yield gauge
        uptime = GaugeMetricFamily("stampede_worker_uptime_seconds", "Seconds since start.")
        uptime.add_metric([], time.time() - s.started_at)
        yield uptime


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event on `stampede.worker` (see `stampede.metrics.log_event`)."""
    metrics.log_event(log, name, level, **fields)


def _follow_up(job_id: str | None) -> dict[str, Any]:
    """The log field naming the job an ack added because the group was enqueued again."""
    return {} if job_id is None else {"follow_up": job_id}


class Worker:
    """Drains a `RepairQueue` with a `RepairStrategy`.

    `backoff` spaces the retries of a failing job (`RetryBackoff(base=0)` retries at
    once). `burst=True` stops by itself once the queue has nothing left for it:
    no job to claim, none in hand and no retry waiting. `registry` is the
    `prometheus_client` registry its metrics go to (a new one by default).
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
        self.backoff = backoff if backoff is not None else RetryBackoff()
        self.burst = burst
        self.sweep_interval = sweep_interval
        self.version_grace = version_grace
        self.stats = WorkerStats()
        self.stopping = asyncio.Event()
        self._in_hand: set[asyncio.Task[None]] = set()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(WorkerCollector(self.stats))
        self._job_seconds = Histogram(
            "stampede_worker_job_seconds",
            "Seconds from claim to ack (or failure) per job, by outcome.",
            ["outcome"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )

    def stop(self) -> None:
        """Take no new jobs; `run` returns once the jobs in hand are finished or released."""
        self.stopping.set()

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
        await hook()
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
        sweeping = asyncio.create_task(self._sweep_loop())
        idle = self.poll_interval
        try:
            while not self.stopping.is_set():
                free = self.concurrency - len(self._in_hand)
                if free <= 0:  # full: wait for a job to finish, or for stop()
                    stop = asyncio.ensure_future(self.stopping.wait())
                    await asyncio.wait({*self._in_hand, stop}, return_when=asyncio.FIRST_COMPLETED)
                    stop.cancel()
                    continue
                jobs = await self._claim(free)
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
                    task = asyncio.create_task(self._process(job))
                    self._in_hand.add(task)
                    self.stats.in_hand = len(self._in_hand)
                    task.add_done_callback(self._done)
        finally:
            await self._drain()
            health.cancel()
            sweeping.cancel()
            await self._check_queue()
            event("worker.stop", consumer=self.consumer, **self._counts())

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_hand.discard(task)
        self.stats.in_hand = len(self._in_hand)

    async def _drained(self) -> bool:
        """Burst mode: nothing to claim now and no retry waiting for its delay."""
        try:
            stats = await self.queue.stats(detailed=True)
        except StampedeError:
            return False
        return stats["lag"] == 0 and stats["delayed"] == 0

    async def _claim(self, count: int) -> list[Job]:
        try:
            return await self.queue.claim(self.consumer, count, block_ms=self.block_ms)
        except Exception as exc:  # a worker outlives a bad shard or a bad reply
            self.stats.error("claim")
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
            self.stats.error("release")
            event("job.release_failed", logging.WARNING, job=job.id, error=str(exc))

    async def _process(self, job: Job) -> None:
        group = job.group.decode("utf-8", "backslashreplace")
        started = time.perf_counter()
        outcome = "failed"
        try:
            if not job.keys:
                await self._dead(job, job.last_error or "malformed job entry")
                outcome = "dead_lettered"
                return
            if job.deliveries > self.queue.max_attempts:
                await self._dead(
                    job, f"its worker died {job.deliveries - 1} times while repairing it"
                )
                outcome = "dead_lettered"
                return
            with tracing.span("repair_job", group=group, job=job.id) as traced:
                outcome = await self._repair(job, group)
                traced.set(action=outcome)
        except asyncio.CancelledError:
            outcome = "released"
            await self._release(job)
            raise
        except Exception as exc:  # any failure is recorded on the job, never fatal
            outcome = await self._failed(job, group, exc)
        finally:
            self._job_seconds.labels(outcome=outcome).observe(time.perf_counter() - started)

    async def _failed(self, job: Job, group: str, exc: Exception) -> str:
        self.stats.error("repair")
        error = f"{type(exc).__name__}: {exc}"
        delay = self.backoff.delay(job.attempts + 1)
        try:
            dead = await self.queue.fail(job, error, delay=delay)
        except StampedeError as again:
            self.stats.error("record")
            event("job.fail_unrecorded", logging.ERROR, job=job.id, group=group, error=str(again))
            return "failed"
        if dead:
            self.stats.dead_lettered += 1
            event(
                "job.dead_lettered",
                logging.WARNING,
                job=job.id,
                group=group,
                error=error,
                attempts=job.attempts + 1,
                delays=[round(d, 3) for d in job.delays],
            )
            return "dead_lettered"
        self.stats.failed += 1
        metrics.worker_retry()
        event(
            "job.failed",
            logging.WARNING,
            job=job.id,
            group=group,
            error=error,
            attempts=job.attempts + 1,
            retry_in=round(delay, 3),
        )
        return "failed"

    async def _repair(self, job: Job, group: str) -> str:
        mode = Mode(job.mode) if job.mode in ("stamp", "commit") else self.mode
        obs = await pipeline.observe(self.topology, job.group, job.keys, mode)
        verdict = judge(obs)
        if verdict.status in (Status.CONSISTENT, Status.NOT_FOUND):
            follow_up = await self.queue.ack(job)
            self.stats.already_consistent += 1
            self.stats.done += 1
            metrics.repair(RepairAction.ALREADY_CONSISTENT.value, "worker")
            event(
                "job.done",
                job=job.id,
                group=group,
                action="already_consistent",
                **_follow_up(follow_up),
            )
            return "already_consistent"
        ctx = RepairContext(self.topology, mode, self.versions, self.ttl)
        outcome = await pipeline.repair(self.strategy, ctx, obs, verdict, source="worker")
        if outcome.action is RepairAction.LOST_RACE:
            self.stats.lost_races += 1
            event("job.lost_race", logging.DEBUG, job=job.id, group=group)
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
        return {
            RepairAction.REWRITTEN: "repaired",
            RepairAction.ROLLED_FORWARD: "rolled_forward",
            RepairAction.DELETED: "deleted",
        }.get(outcome.action, "already_consistent")

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
            stats = await self.queue.stats(detailed=True)
        except StampedeError as exc:
            self.stats.error("queue_stats")
            event("worker.queue_unreachable", logging.WARNING, error=str(exc))
            return
        self.stats.queue_length = stats["length"]
        self.stats.queue_pending = stats["pending"]
        self.stats.queue_lag = stats["lag"]
        self.stats.queue_delayed = stats["delayed"]
        self.stats.queue_dead = stats["dead"]

    async def _sweep_loop(self) -> None:
        """Collect transactions' version hashes of keys no longer written, now and then."""
        if self.sweep_interval <= 0:
            return
        while True:
            await asyncio.sleep(self.sweep_interval)
            try:
                visited = await sweep(self.topology, grace=self.version_grace)
            except StampedeError as exc:  # a shard down: try again next time
                event("worker.sweep_failed", logging.WARNING, error=str(exc))
                continue
            event("worker.sweep", logging.DEBUG, version_hashes=visited)

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

    async def check_health(self, ping_timeout: float = 2.0) -> tuple[bool, dict[str, str]]:
        """PING every shard; (all answered, shard -> "ok" or the error). For `/healthz`."""
        try:
            shards = list(self.topology.shard_names)
        except Exception as exc:  # a cluster whose slot map could not be loaded
            return False, {"topology": f"{type(exc).__name__}: {exc}"}

        async def ping(shard: str) -> str:
            try:
                await asyncio.wait_for(self.topology.execute_on(shard, "PING"), ping_timeout)
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return "ok"

        answers = await asyncio.gather(*(ping(s) for s in shards))
        detail = dict(zip(shards, answers, strict=True))
        return bool(shards) and all(a == "ok" for a in answers), detail

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
            "released": s.released,
            "queue_lag": s.queue_lag,
            "queue_pending": s.queue_pending,
            "queue_delayed": s.queue_delayed,
        }


async def serve_metrics(
    worker: Worker,
    port: int,
    host: str = "127.0.0.1",
    *,
    registry: CollectorRegistry | None = None,
) -> asyncio.Server:
    """A small HTTP endpoint: `GET /metrics` (and `/`) the Prometheus text of `registry`
    (the worker's by default), `GET /healthz` 200 while every shard answers PING, 503
    with the failing shards otherwise."""
    source = registry if registry is not None else worker.registry

    async def respond(path: str) -> tuple[bytes, bytes, bytes]:
        if path in ("/", "/metrics"):
            body = await asyncio.to_thread(generate_latest, source)
            return b"200 OK", CONTENT_TYPE_LATEST.encode(), body
        if path == "/healthz":
            ok, detail = await worker.check_health()
            text = "".join(f"{shard} {state}\n" for shard, state in detail.items())
            status = b"200 OK" if ok else b"503 Service Unavailable"
            return status, b"text/plain; charset=utf-8", (text or "no shards\n").encode()
        return b"404 Not Found", b"text/plain", b"try /metrics or /healthz\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            parts = head.split(b"\r\n", 1)[0].split()
            path = parts[1].decode("latin-1").split("?", 1)[0] if len(parts) > 1 else "/"
            status, ctype, body = await respond(path)
            writer.write(
                b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (status, ctype, len(body), body)
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
