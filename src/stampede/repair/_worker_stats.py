"""What a repair worker reports and how it waits: its counters (`WorkerStats`) and
their Prometheus collector, the retry backoff of failed jobs, the strategy's
lifecycle hooks, and the small HTTP endpoint serving `/metrics` and `/healthz`."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .._backoff import backoff
from .._health import ping
from ..errors import ConfigurationError
from ..results import RepairAction
from ..typing import Topology

if TYPE_CHECKING:
    from ._worker import Worker

__all__ = [
    "_ERROR_KINDS",
    "_OUTCOMES",
    "RetryBackoff",
    "StrategyLifecycle",
    "WorkerCollector",
    "WorkerStats",
    "ping_shards",
    "serve_metrics",
]


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
        return backoff(
            retry - 1, self.base, self.max_delay, factor=self.factor, jitter=self.jitter, rng=rng
        )


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
    postponed: int = 0
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

    def finished(self, action: RepairAction) -> str:
        """Count a job done with `action`; the outcome's name in the worker's log."""
        self.done += 1
        outcome = _FINISHED.get(action)
        if outcome is None:  # nothing was changed, and nothing to count it under
            return "already_consistent"
        setattr(self, outcome, getattr(self, outcome) + 1)
        return outcome

    def queue_gauges(self, stats: dict[str, int]) -> None:
        """Take the queue's gauges from `RepairQueue.stats(detailed=True)`."""
        self.queue_length = stats["length"]
        self.queue_pending = stats["pending"]
        self.queue_lag = stats["lag"]
        self.queue_delayed = stats["delayed"]
        self.queue_dead = stats["dead"]

    def counts(self) -> dict[str, int]:
        """The counters the worker's periodic health event logs."""
        return {
            "done": self.done,
            "repaired": self.repaired,
            "rolled_forward": self.rolled_forward,
            "already_consistent": self.already_consistent,
            "lost_races": self.lost_races,
            "failed": self.failed,
            "postponed": self.postponed,
            "dead_lettered": self.dead_lettered,
            "released": self.released,
            "queue_lag": self.queue_lag,
            "queue_pending": self.queue_pending,
            "queue_delayed": self.queue_delayed,
        }


async def ping_shards(topology: Topology, ping_timeout: float) -> tuple[bool, dict[str, str]]:
    """PING every shard; (all answered, shard -> "ok" or the error). For `/healthz`."""
    health = await ping(topology, ping_timeout)
    detail = {**dict.fromkeys(health.latency, "ok"), **health.errors}
    return health.ok, detail


_OUTCOMES = (
    "repaired rolled_forward deleted already_consistent failed postponed dead_lettered released"
).split()


_ERROR_KINDS = ("claim", "repair", "record", "release", "queue_stats")


class WorkerCollector(Collector):
    """A `prometheus_client` collector reading a worker's `WorkerStats` at scrape time."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterable[Metric]:
        s = self.stats
        yield _counter(
            "stampede_worker_jobs_claimed",
            "Jobs this worker claimed from the repair stream.",
            s.claimed,
        )
        jobs = CounterMetricFamily(
            "stampede_worker_jobs",
            "Jobs this worker finished, by outcome: repaired (rewritten), rolled_forward, "
            "deleted, already_consistent (done); failed (retried after a delay), "
            "postponed (waiting for a transaction to be decided, or a write in flight "
            "to land: no attempt counted), "
            "dead_lettered, released (handed back on stop).",
            labels=["outcome"],
        )
        for outcome in _OUTCOMES:
            jobs.add_metric([outcome], getattr(s, outcome))
        yield jobs
        yield _counter(
            "stampede_worker_lost_races",
            "Repairs a newer write beat (re-read, then retried).",
            s.lost_races,
        )
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


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """A counter family of one unlabelled sample."""
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


_FINISHED = {
    RepairAction.REWRITTEN: "repaired",
    RepairAction.ROLLED_FORWARD: "rolled_forward",
    RepairAction.DELETED: "deleted",
    RepairAction.ALREADY_CONSISTENT: "already_consistent",
    RepairAction.LOST_RACE: "already_consistent",
}
"""The `WorkerStats` counter (and log name) of a job finished with each action (a lost
race finishes a job only when the newer write left the group whole: nothing was left
to do, as for one found whole; `lost_races` counts it too)."""
