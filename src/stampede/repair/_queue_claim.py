"""Taking over the jobs of dead workers (`RepairQueue.reclaim` calls this)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from .._lua import script
from ._jobs import CONSUMER_GROUP, Job, parse_job

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["MIN_IDLE", "reclaim"]

_RECLAIM = script("queue_reclaim")

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
    after, entries = await queue.topology.script(_RECLAIM, [stream], args)
    queue.cursors[stream] = after if isinstance(after, bytes) else str(after).encode()
    return [
        parse_job(stream, eid, fields, int(n), queue.max_attempts) for eid, fields, n in entries
    ]
