"""The repair worker's housekeeping, run beside its jobs: collecting read-atomic
transactions' old versions (`sweep_loop`) and removing the consumers of workers that
are gone (`forget_loop`); and the check of its settings (`check_settings`)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import TYPE_CHECKING

from .. import metrics
from .._txn.sweep import sweep
from ..errors import ConfigurationError, StampedeError
from ..typing import Topology
from ._jobs import check_consumer
from ._queue_admin import collect_markers

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["FORGET_INTERVAL", "check_settings", "consumer_name", "forget_loop", "sweep_loop"]

log = logging.getLogger("stampede.worker")

FORGET_INTERVAL = 60.0
"""Seconds between two rounds of `forget_loop`."""


_AT_LEAST = {"concurrency": 1, "block_ms": 0, "grace": 0, "job_timeout": 0, "version_grace": 0}
_ABOVE_ZERO = ("poll_interval", "health_interval")


def check_settings(**settings: float | None) -> None:
    """ConfigurationError naming the first worker setting out of its range: a
    negative `job_timeout` failed every attempt at once (every job dead-lettered), a
    `poll_interval` or `health_interval` of 0 spun the event loop against Redis."""
    for name, value in settings.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise ConfigurationError(f"the worker's {name} must be a number, got {value!r}")
        low = _AT_LEAST.get(name)
        if (low is not None and value < low) or (name in _ABOVE_ZERO and value <= 0):
            bound = f"at least {low}" if low is not None else "above 0"
            raise ConfigurationError(f"the worker's {name} must be {bound}, got {value}")


def consumer_name(consumer: object) -> str:
    """The worker's consumer name: `consumer`, or `<host>-<pid>` when None. An empty
    name, one that is not text, or a name the queue keeps for itself (`check_consumer`)
    is a ConfigurationError (an empty one fell back to the default silently, so two
    workers given '' each took another name)."""
    if consumer is None:
        return f"{socket.gethostname()}-{os.getpid()}"
    return check_consumer(consumer)


async def sweep_loop(topology: Topology, interval: float, grace: float) -> None:
    """Collect transactions' version hashes of keys no longer written, every `interval`
    seconds (never when it is 0 or less)."""
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            visited = await sweep(topology, grace=grace)
        except StampedeError as exc:  # a shard down: try again next time
            metrics.log_event(log, "worker.sweep_failed", logging.WARNING, error=str(exc))
            continue
        metrics.log_event(log, "worker.sweep", logging.DEBUG, version_hashes=visited)


async def forget_loop(queue: RepairQueue, interval: float = FORGET_INTERVAL) -> None:
    """Delete the consumer entries of workers that are gone (no job held, idle for the
    queue's `forget_after`) and collect the markers that no longer stand for a job
    (`collect_markers`), now, then every `interval` seconds."""
    while True:
        try:
            forgotten = await queue.forget_consumers()
            collected = await collect_markers(queue)
        except StampedeError as exc:  # a shard down: try again next time
            metrics.log_event(log, "worker.forget_failed", logging.WARNING, error=str(exc))
        else:
            if forgotten:
                metrics.log_event(log, "worker.consumers_forgotten", consumers=forgotten)
            if collected:
                metrics.log_event(log, "worker.markers_collected", markers=collected)
        await asyncio.sleep(interval)
