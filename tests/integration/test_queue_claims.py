"""Claiming jobs from the repair queue: taking over dead workers' jobs, exclusively,
counting only the deliveries that died, and draining past entries that are not jobs."""

from __future__ import annotations

from stampede import Stampede
from stampede.repair import CONSUMER_GROUP, RepairQueue
from stampede.repair._queue import Job


async def abandon(st: Stampede, queue: RepairQueue, job: Job, consumer: str = "dead") -> None:
    """Make `job` look held by a worker that died: idle past `min_idle`, its delivery
    count kept (XCLAIM JUSTID)."""
    await st.topology.execute(
        job.stream, "XCLAIM", job.stream, CONSUMER_GROUP, consumer, 0, job.id,
        "IDLE", queue.min_idle_ms + 1, "JUSTID",
    )  # fmt: skip


async def test_a_dead_workers_job_behind_many_held_ones_is_taken_over(st: Stampede) -> None:
    """A live worker holds 300 jobs; the newest one's worker died. Each reclaim looked at
    the first 10 * count pending entries from the start, so a reclaim of one job never
    reached it: the walk goes on from where the last call stopped."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    for n in range(300):
        assert await queue.enqueue(f"far:{n}", [f"far:{n}:a"], {}, "torn") is not None
    held = await queue.claim("live", 300)
    assert len(held) == 300
    last = max(held, key=lambda job: tuple(map(int, job.id.split("-"))))
    await abandon(st, queue, last)
    taken: list[Job] = []
    for _ in range(10):  # a bounded stretch per call: a few calls reach the end
        taken += await queue.reclaim("other", 1)
        if taken:
            break
    assert [job.id for job in taken] == [last.id] and taken[0].deliveries == 2
    assert await queue.reclaim("other", 10) == []  # the live worker's jobs stay its own
