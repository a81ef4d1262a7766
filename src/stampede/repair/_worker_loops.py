"""The repair worker's housekeeping, run beside its jobs: collecting read-atomic
transactions' old versions (`sweep_loop`)."""

from __future__ import annotations

import asyncio
import logging

from .. import metrics
from .._txn.sweep import sweep
from ..errors import StampedeError
from ..typing import Topology

__all__ = ["sweep_loop"]

log = logging.getLogger("stampede.worker")


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
