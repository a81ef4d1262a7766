"""Claiming jobs: new ones (`read_new`, recovering what a claim whose reply was lost
delivered) and those of dead workers (`reclaim`); `RepairQueue.claim` calls these."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

from .._lua import script
from ..errors import OutcomeUnknownError, StampedeError
from ._jobs import CONSUMER_GROUP, Job, parse_job

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["MIN_IDLE", "each_partition", "read_new", "reclaim"]

_RECLAIM = script("queue_reclaim")

_RECOVER = script("queue_recover")

MIN_IDLE = 0.1
"""The shortest `min_idle` (seconds): a live worker touches its jobs every quarter of
it, and a take-over must outlast the gaps a busy event loop leaves between touches."""

SCAN = 1000
"""At most this many pending entries looked at per partition and call."""


async def reclaim(
    queue: RepairQueue, stream: bytes, consumer: str, want: int, in_hand: Collection[str] = ()
) -> list[Job]:
    """Up to `want` jobs of `stream` idle past `min_idle`, now `consumer`'s, never one
    whose id is in `in_hand` (the caller holds it already).

    The pending list is walked from the partition's cursor (kept on the queue) a
    bounded stretch at a time: `XAUTOCLAIM` from `0-0` on every call looked at the
    first `10 * count` entries only, so an idle job behind that many held ones was
    taken over late, or never."""
    scan = min(SCAN, max(100, 10 * want))
    cursor = queue.cursors.get(stream, b"-")
    args = [CONSUMER_GROUP, consumer, queue.min_idle_ms, cursor, scan, want, *in_hand]
    started = time.monotonic()
    try:
        after, entries = await queue.topology.script(_RECLAIM, [stream], args)
    except OutcomeUnknownError:  # what it took is recovered, as a lost XREADGROUP's
        return await _recover(queue, stream, consumer, started, in_hand)
    queue.cursors[stream] = after if isinstance(after, bytes) else str(after).encode()
    return [
        parse_job(stream, eid, fields, int(n), queue.max_attempts) for eid, fields, n in entries
    ]


async def read_new(
    queue: RepairQueue,
    stream: bytes,
    consumer: str,
    want: int,
    block_ms: int,
    in_hand: Collection[str],
) -> list[Job]:
    """Up to `want` jobs of `stream` never delivered, now `consumer`'s (XREADGROUP,
    blocking up to `block_ms` when not 0).

    XREADGROUP is not sent again after a lost reply (a resend delivers other entries):
    what the lost call delivered is pending in `consumer`'s name, unknown to it, and
    was taken over only after `min_idle` with a delivery counted as a worker's death.
    It is recovered at once instead: the entries `consumer` holds that were delivered
    during the call (idle no longer than it took) and that are not in `in_hand`."""
    block = ["BLOCK", block_ms] if block_ms else []
    started = time.monotonic()
    try:
        reply = await queue.topology.execute(
            stream, "XREADGROUP", "GROUP", CONSUMER_GROUP, consumer, "COUNT", want, *block,
            "STREAMS", stream, ">",
        )  # fmt: skip
    except OutcomeUnknownError:
        return await _recover(queue, stream, consumer, started, in_hand)
    return [
        parse_job(stream, eid, fields, 1, queue.max_attempts)
        for _, entries in reply or []
        for eid, fields in entries
        if fields
    ]


async def _recover(
    queue: RepairQueue, stream: bytes, consumer: str, started: float, in_hand: Collection[str]
) -> list[Job]:
    """The jobs of `stream` that a call started at `started` (monotonic) whose reply was
    lost delivered to `consumer`: those it holds, delivered since, not in `in_hand`."""
    within = int((time.monotonic() - started) * 1000) + 100
    args = [CONSUMER_GROUP, consumer, within, *in_hand]
    found = await queue.topology.script(_RECOVER, [stream], args)
    return [parse_job(stream, eid, fields, int(n), queue.max_attempts) for eid, fields, n in found]


async def each_partition(
    streams: list[bytes],
    call: Callable[[bytes, Callable[[], Awaitable[list[Job]]]], Awaitable[list[Job]]],
    step: Callable[[bytes, int], Awaitable[list[Job]]],
    count: int,
    jobs: list[Job],
) -> StampedeError | None:
    """`step(stream, want)` through `call` for each of `streams` in turn, its jobs added
    to `jobs`, until `count` are there; the first error, or None. A partition that
    fails is passed over: the jobs already delivered to the caller are held in its name
    (raised, they were stranded until `min_idle`, then counted as a worker's death), and
    one shard down no longer keeps every other partition's jobs waiting."""
    failed: StampedeError | None = None
    for stream in streams:
        if (want := count - len(jobs)) <= 0:
            break
        try:
            jobs.extend(await call(stream, lambda s=stream, w=want: step(s, w)))  # type: ignore[misc]
        except StampedeError as exc:
            failed = failed or exc
    return failed
