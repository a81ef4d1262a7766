"""What a repair worker records of a job that does not end in a repair: a failed
attempt (a retry or a dead letter) and a job that can only be dead-lettered. Each is
counted and logged only for what the queue says happened: a job another worker took
over (and may have finished) meanwhile is left to it, counted under no outcome."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import metrics
from ..errors import StampedeError
from . import _queue_admin as _admin

if TYPE_CHECKING:
    from ._jobs import Job
    from ._worker import Worker

__all__ = ["dead", "event", "failed", "follow_up"]

log = logging.getLogger("stampede.worker")


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event on `stampede.worker` (see `stampede.metrics.log_event`)."""
    metrics.log_event(log, name, level, **fields)


def follow_up(job_id: str | None) -> dict[str, Any]:
    """The log field naming the job an ack added because the group was enqueued again."""
    return {} if job_id is None else {"follow_up": job_id}


def _taken_over(worker: Worker, job: Job, group: str) -> str:
    event("job.taken_over", job=job.id, group=group, consumer=worker.consumer)
    return "taken_over"


async def failed(worker: Worker, job: Job, group: str, exc: Exception) -> str:
    """Record a failed attempt at `job` (retry after the backoff, or dead-letter); the
    outcome's name for the job histogram."""
    worker.stats.error("repair")
    error = f"{type(exc).__name__}: {exc}"
    delay = worker.backoff.delay(job.attempts + 1)
    try:
        dead_lettered = await worker.queue.fail(job, error, delay=delay, holder=worker.consumer)
    except StampedeError as again:
        worker.stats.error("record")
        event("job.fail_unrecorded", logging.ERROR, job=job.id, group=group, error=str(again))
        return "failed"
    if dead_lettered is None:  # another worker took it over: its outcome, not ours
        return _taken_over(worker, job, group)
    facts = {"job": job.id, "group": group, "error": error, "attempts": job.attempts + 1}
    if dead_lettered:
        worker.stats.dead_lettered += 1
        delays = [round(d, 3) for d in job.delays]
        event("job.dead_lettered", logging.WARNING, **facts, delays=delays)
        return "dead_lettered"
    worker.stats.failed += 1
    metrics.worker_retry()
    event("job.failed", logging.WARNING, **facts, retry_in=round(delay, 3))
    return "failed"


async def dead(worker: Worker, job: Job, error: str) -> str:
    """Dead-letter `job` at once (not a job, or its worker died too often), if this
    worker still holds it; the outcome's name for the job histogram."""
    group = job.group.decode("utf-8", "backslashreplace")
    done = await _admin.dead_letter(worker.queue, job, error, None, worker.consumer)
    if done is False:
        return _taken_over(worker, job, group)
    worker.stats.dead_lettered += 1
    event(
        "job.dead_lettered",
        logging.WARNING,
        job=job.id,
        group=group,
        error=error,
        **follow_up(done if isinstance(done, str) else None),
    )
    return "dead_lettered"
