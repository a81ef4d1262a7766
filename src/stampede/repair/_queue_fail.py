"""Recording a failed attempt at a job: a retry, now or after a delay, or a dead letter
(`RepairQueue.fail` calls this)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lua import script
from . import _queue_admin as _admin
from ._jobs import CONSUMER_GROUP, Job, encode_fields, flatten, receipt_key

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["fail", "postpone"]

_RETRY = script("queue_retry")


async def fail(
    queue: RepairQueue, job: Job, error: str, delay: float, holder: str | None
) -> bool | None:
    """`RepairQueue.fail`: True when dead-lettered, False when retried, None when the
    job is no longer pending (or no longer `holder`'s): nothing was done."""
    attempts = job.attempts + 1
    if attempts >= queue.max_attempts or not job.keys:
        done = await _admin.dead_letter(queue, job, error, attempts, holder)
        return None if done is False else True
    delay = max(0.0, delay)
    delays = (*job.delays, delay) if delay > 0 else job.delays
    fields = encode_fields(
        job.group,
        job.keys,
        job.seen,
        job.reason,
        job.enqueued_at,
        attempts,
        job.mode,
        delays,
        job.waited,
    )
    return await _retry(queue, job, fields, error, delay, holder)


async def postpone(
    queue: RepairQueue, job: Job, why: str, delay: float, holder: str | None
) -> bool | None:
    """`RepairQueue.postpone`: True when the job waits `delay` seconds (at least 1 ms),
    its attempts unchanged and `waited` grown by `delay`; None as `fail` says."""
    delay = max(0.001, delay)
    fields = encode_fields(
        job.group,
        job.keys,
        job.seen,
        job.reason,
        job.enqueued_at,
        job.attempts,
        job.mode,
        job.delays,
        job.waited + delay,
    )
    return None if await _retry(queue, job, fields, why, delay, holder) is None else True


async def _retry(
    queue: RepairQueue,
    job: Job,
    fields: dict[bytes, bytes],
    error: str,
    delay: float,
    holder: str | None,
) -> bool | None:
    """Put `job` back with `fields` (plus `last_error`), after `delay` seconds; False,
    or None when it is no longer pending (or no longer `holder`'s)."""
    fields[b"last_error"] = error[:500].encode("utf-8", "backslashreplace")
    retried = await queue.topology.script(  # the delay runs on the server's clock
        _RETRY,  # resent after a lost reply: its receipt tells what its first run did
        [*queue.side_keys(job.stream)[:4], receipt_key(job.stream)],
        [CONSUMER_GROUP, job.id, job.group, holder or "", int(delay * 1000), *flatten(fields)],
    )
    return None if retried == 0 else False
