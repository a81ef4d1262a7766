"""What a repair worker records of a job that does not end in a repair: a failed
attempt (a retry or a dead letter), a job put off while a transaction commits at its
keys, and a job that can only be dead-lettered. Each is counted and logged only for
what the queue says happened: a job another worker took over (and may have finished)
meanwhile is left to it, counted under no outcome."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import metrics
from .._txn.sweep import UNDECIDED_MS
from ..errors import StampedeError
from . import _queue_admin as _admin

if TYPE_CHECKING:
    from ..verdict import Observation
    from ._jobs import Job
    from ._worker import Worker

__all__ = [
    "UNDECIDED_WAIT",
    "InFlight",
    "Undecided",
    "dead",
    "event",
    "failed",
    "follow_up",
    "in_flight",
]

log = logging.getLogger("stampede.worker")

UNDECIDED_WAIT = 2 * UNDECIDED_MS / 1000
"""Seconds a job may be put off in all waiting for transactions still committing at its
keys (each is decided within `UNDECIDED_MS`), before such a wait counts as a failed
attempt like any other: a job that keeps meeting new ones is not put off for ever."""

WAIT_DELAY = (0.5, 10.0)
"""The shortest and longest delay of one wait (the retry backoff's, within these)."""


class Undecided(StampedeError):
    """The repair met a transaction still committing at the group's keys (`keys`)."""

    def __init__(self, keys: str) -> None:
        super().__init__(
            f"a transaction is still committing at {keys}: the group is read again once "
            "it is decided"
        )


class InFlight(StampedeError):
    """The group holds a write newer than any its job's read saw, not landed whole:
    a writer the read never waited for may be finishing it. `seen` is what the worker
    saw (the job's new `seen`)."""

    def __init__(self, seen: dict[str, str | None]) -> None:
        self.seen = seen
        super().__init__(
            "a write newer than any the job's read saw has reached only part of the "
            "group: the group is read again once its writer has had time to finish"
        )


def _newest(seen: dict[str, str | None]) -> tuple[int, str] | None:
    stamps = []
    for stamp in seen.values():
        version, _, rest = (stamp or "").partition(":")
        if version.isdigit() and rest:
            stamps.append((int(version), rest.split(":", 1)[0]))
    return max(stamps) if stamps else None


def in_flight(job: Job, obs: Observation) -> bool:
    """Does the (torn) group hold a write newer than every stamp the job's read saw?
    A job that names none (queued without what its read saw) is repaired at once; so
    is one past its waiting budget (`UNDECIDED_WAIT`), as a read past its deadline."""
    was = _newest(job.seen)
    newest = obs.newest()
    if was is None or newest is None or job.waited >= UNDECIDED_WAIT:
        return False
    return (newest.version, newest.token) > was


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
    """Record a failed attempt at `job` (retry after the backoff, or dead-letter), or a
    wait for a transaction (put off, no attempt counted); the outcome's name for the
    job histogram."""
    if isinstance(exc, InFlight) and job.waited < UNDECIDED_WAIT:
        return await _postpone(worker, replace(job, seen=exc.seen), group, exc)
    if isinstance(exc, Undecided) and job.waited < UNDECIDED_WAIT:
        return await _postpone(worker, job, group, exc)
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


async def _postpone(worker: Worker, job: Job, group: str, exc: StampedeError) -> str:
    """Put `job` off until the transaction at its keys is decided (or the write in
    flight there has had time to land), counting no attempt."""
    low, high = WAIT_DELAY
    delay = min(max(worker.backoff.delay(job.attempts + 1), low), high)
    try:
        put_off = await worker.queue.postpone(job, str(exc), delay=delay, holder=worker.consumer)
    except StampedeError as again:
        worker.stats.error("record")
        event("job.fail_unrecorded", logging.ERROR, job=job.id, group=group, error=str(again))
        return "failed"
    if put_off is None:
        return _taken_over(worker, job, group)
    worker.stats.postponed += 1
    waited = round(job.waited + delay, 3)
    event("job.postponed", job=job.id, group=group, reason=str(exc), retry_in=round(delay, 3),
          waited=waited)  # fmt: skip
    return "postponed"


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
