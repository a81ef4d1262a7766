"""A reader told "queued" is always followed by a repair that reads after its enqueue.

The race: a worker has taken a group's job (and may have read the group) when the
group tears again; the reader's enqueue finds the job pending and is told queued.
The ack of the old job must then leave a follow-up job behind, not an empty queue.
Every step is driven in order through the queue's and worker's own API, on real
servers, over both topologies.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

from stampede import RetryPolicy, Stampede, Status
from stampede.repair import CONSUMER_GROUP, Enqueue, NewestWins, RepairContext, RepairQueue
from stampede.repair._queue import Job
from stampede.repair._worker import Worker
from stampede.results import RepairOutcome
from stampede.verdict import Observation, Verdict

from ..support import eventually, spread_keys, write_newer

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
PLAIN = re.compile(rb"\d+-\d+:\d+")  # `<id>:<enqueued_ms>`, the marker as every version wrote it


async def tear(st: Stampede, keys: list[str], payload: bytes) -> tuple[int, str]:
    """A newer write of the group that reached one shard only."""
    shard = st.topology.shard_of(keys[0].encode())
    some = [k.encode() for k in keys if st.topology.shard_of(k.encode()) == shard]
    version, token = await write_newer(st, some, payload)
    st.versions.observe(version)
    return version, token


async def torn_group(st: Stampede, name: str) -> list[str]:
    keys = spread_keys(st, name)
    await st.write(name, dict.fromkeys(keys, b"old"))
    await tear(st, keys, b"first")
    return keys


async def check_repaired(st: Stampede, group: str, keys: list[str], stamp: tuple[int, str]) -> None:
    """Whole again, at least as new as the second tear, each key keeping its payload."""
    result = await st.read(group, keys, retry=QUICK)
    assert result.consistent and not result.repaired  # the worker did it, not this read
    assert result.version is not None and result.version >= stamp[0]
    torn = st.topology.shard_of(keys[0].encode())
    assert result.values == {
        k: b"second" if st.topology.shard_of(k.encode()) == torn else b"old" for k in keys
    }


async def marker(st: Stampede, queue: RepairQueue, group: bytes) -> bytes | None:
    pending = queue.pending_key(queue.stream_for(group))
    value: bytes | None = await st.topology.execute(pending, "HGET", pending, group)
    return value


async def drained(queue: RepairQueue) -> bool:
    stats = await queue.stats()
    return stats["length"] == 0 and stats["pending"] == 0


async def test_enqueue_while_a_job_is_in_hand_is_followed_by_a_repair(st: Stampede) -> None:
    """Claim, tear again, enqueue (told queued), ack: a follow-up job exists and repairs."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    keys = await torn_group(st, "rq")
    first = await st.read("rq", keys, retry=QUICK, repair=Enqueue(queue))
    assert first.queued and first.repair is not None
    job_id = first.repair.detail["job"]
    (job,) = await queue.claim("worker", 10)  # the worker's step: it reads the group next
    assert job.id == job_id

    stamp = await tear(st, keys, b"second")  # torn again while the job is in hand
    again = await st.read("rq", keys, retry=QUICK, repair=Enqueue(queue))
    assert again.queued and again.status is Status.TORN
    assert again.repair is not None and again.repair.detail == {"job": "already pending"}

    follow_up = await queue.ack(job)
    jobs = await queue.claim("worker", 10)
    assert len(jobs) == 1, "the ack left no job for the reader told queued"
    next_job = jobs[0]
    assert next_job.id == follow_up != job.id and next_job.group == b"rq"
    assert next_job.keys == [k.encode() for k in keys] and next_job.attempts == 0
    assert set(next_job.seen) == set(keys)
    assert next_job.enqueued_at >= job.enqueued_at and next_job.mode == "stamp"
    await queue.release(next_job)  # hand it to the worker below

    worker = Worker(st.topology, queue, NewestWins(), concurrency=1, block_ms=50)
    task = asyncio.create_task(worker.run())
    await eventually(lambda: drained(queue), within=10)
    worker.stop()
    await task
    await check_repaired(st, "rq", keys, stamp)
    assert await marker(st, queue, b"rq") is None


class Gated(NewestWins):
    """NewestWins whose first repair, once done, waits for the test before returning."""

    def __init__(self) -> None:
        super().__init__()
        self.repaired = asyncio.Event()
        self.proceed = asyncio.Event()
        self.calls = 0

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        outcome = await super().repair(ctx, obs, verdict)
        self.calls += 1
        if self.calls == 1:
            self.repaired.set()
            await self.proceed.wait()  # the worker is between its repair and its ack
        return outcome


async def test_worker_repairs_a_group_torn_between_its_repair_and_its_ack(st: Stampede) -> None:
    """The issue's race through a running worker: the second tear is repaired too."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    keys = await torn_group(st, "wr")
    assert (await st.read("wr", keys, retry=QUICK, repair=Enqueue(queue))).queued
    gated = Gated()
    worker = Worker(st.topology, queue, gated, concurrency=1, block_ms=50, poll_interval=0.01)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(gated.repaired.wait(), timeout=10)
        assert (await st.read("wr", keys, retry=QUICK)).consistent  # the first repair landed
        stamp = await tear(st, keys, b"second")
        told = await st.read("wr", keys, retry=QUICK, repair=Enqueue(queue))
        assert told.queued and told.repair is not None
        assert told.repair.detail == {"job": "already pending"}
        gated.proceed.set()

        async def repaired_again() -> bool:
            return worker.stats.done == 2 and await drained(queue)

        await eventually(repaired_again, within=10)
    finally:
        gated.proceed.set()
        worker.stop()
        await task
    assert worker.stats.repaired == 2 and worker.stats.failed == 0
    await check_repaired(st, "wr", keys, stamp)
    assert await marker(st, queue, b"wr") is None


async def test_plain_path_acks_and_leaves_nothing_pending(st: Stampede) -> None:
    """Enqueues before any worker took the job change nothing; the ack clears everything."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    job_id = await queue.enqueue("pl", ["pl:a"], {}, "torn")
    assert job_id is not None
    assert PLAIN.fullmatch(await marker(st, queue, b"pl") or b"")
    before = await marker(st, queue, b"pl")
    assert await queue.enqueue("pl", ["pl:a"], {}, "torn") is None  # not delivered yet
    assert await marker(st, queue, b"pl") == before
    (job,) = await queue.claim("w", 10)
    assert job.id == job_id
    assert await queue.ack(job) is None
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}
    assert await marker(st, queue, b"pl") is None
    assert await queue.enqueue("pl", ["pl:a"], {}, "torn") is not None


async def test_markers_written_by_older_versions_keep_working(st: Stampede) -> None:
    """A `<id>:<ms>` marker of an earlier version is read, dirtied, and followed up."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    job_id = await queue.enqueue("om", ["om:a"], {}, "torn")
    (job,) = await queue.claim("w", 10)
    pending = queue.pending_key(queue.stream_for(b"om"))
    old = b"%s:%d" % (job_id.encode() if job_id else b"", int(time.time() * 1000) - 5000)
    await st.topology.execute(pending, "HSET", pending, b"om", old)  # as an old version wrote it

    assert await queue.enqueue("om", ["om:a"], {"om:a": None}, "partial") is None
    dirty = await marker(st, queue, b"om") or b""
    assert dirty.startswith(old + b":1:")
    assert await queue.enqueue("om", ["om:a"], {"om:a": "7:T"}, "torn") is None
    dirty = await marker(st, queue, b"om") or b""
    assert dirty.startswith(old + b":2:")  # the enqueue time stays, the count grows

    follow_up = await queue.ack(job)
    assert follow_up is not None
    plain = await marker(st, queue, b"om") or b""
    assert PLAIN.fullmatch(plain) and plain.startswith(follow_up.encode() + b":")
    (next_job,) = await queue.claim("w", 10)
    assert next_job.id == follow_up
    assert next_job.seen == {"om:a": "7:T"} and next_job.reason == "torn"  # the newest enqueue
    assert await queue.ack(next_job) is None
    assert await drained(queue)


async def test_a_marker_naming_a_vanished_entry_is_replaced(st: Stampede) -> None:
    """A marker whose entry is gone does not swallow enqueues until it expires."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    job_id = await queue.enqueue("vn", ["vn:a"], {}, "torn")
    assert job_id is not None
    stream = queue.stream_for(b"vn")
    await st.topology.execute(stream, "XDEL", stream, job_id)
    fresh = await queue.enqueue("vn", ["vn:a"], {}, "torn")
    assert fresh is not None and fresh != job_id
    (job,) = await queue.claim("w", 10)
    assert job.id == fresh


async def test_retry_and_dead_letter_of_a_job_enqueued_again(st: Stampede) -> None:
    """A retry covers the new enqueue by itself; a dead letter leaves a follow-up job."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    await queue.enqueue("rd", ["rd:a"], {}, "torn")
    (job,) = await queue.claim("w", 10)
    assert await queue.enqueue("rd", ["rd:a"], {}, "torn") is None
    assert not await queue.fail(job, "boom 1")  # retried: a new, undelivered entry
    assert PLAIN.fullmatch(await marker(st, queue, b"rd") or b"")
    (retry,) = await queue.claim("w", 10)
    assert retry.attempts == 1 and retry.last_error == "boom 1"

    assert await queue.enqueue("rd", ["rd:a"], {}, "partial") is None
    assert await queue.fail(retry, "boom 2")  # dead-lettered, but the enqueue came after
    assert len(await queue.dead_letters()) == 1
    (follow_up,) = await queue.claim("w", 10)
    assert follow_up.attempts == 0 and follow_up.reason == "partial"
    assert follow_up.last_error is None
    assert await queue.ack(follow_up) is None
    assert await drained(queue) and await marker(st, queue, b"rd") is None


async def test_follow_up_keeps_binary_group_and_keys(st: Stampede) -> None:
    """The enqueue's fields go through the marker and back byte for byte."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    group = b"bin:\xff\x00:{g}"
    keys = [b"bin:\xfe:{g}:a", b"bin:\x01:{g}:b"]
    await queue.enqueue(group, keys, {}, "torn", mode="commit")
    (job,) = await queue.claim("w", 10)
    assert await queue.enqueue(group, keys, {}, "torn", mode="commit") is None
    follow_up = await queue.ack(job)
    assert follow_up is not None
    (next_job,) = await queue.claim("w", 10)
    assert isinstance(next_job, Job) and next_job.reason == "torn"
    assert (next_job.group, next_job.keys, next_job.mode) == (group, keys, "commit")


async def test_a_stale_worker_failing_a_job_another_worker_acked_adds_no_job(
    st: Stampede,
) -> None:
    """Worker a holds a job past min_idle; worker b takes it over (XAUTOCLAIM), repairs and
    acks it, leaving the follow-up an enqueue asked for. Then a's attempt fails: the job
    is no longer a's to retry (nor anyone's), so no second job, no dead letter appear;
    the group keeps one job queued, the follow-up."""
    for max_attempts in (5, 1):  # a retry; a dead letter
        queue = RepairQueue(st.topology, max_attempts=max_attempts)
        await queue.clear()
        keys = await torn_group(st, "stale")
        await queue.enqueue("stale", keys, {}, "torn")
        (held,) = await queue.claim("a", 10)
        await queue.enqueue("stale", keys, {}, "torn")  # while held: a follow-up is due
        await queue.release(held)  # a looks dead: idle past min_idle
        (taken,) = await queue.reclaim("b", 10)
        assert taken.id == held.id
        follow_up = await queue.ack(taken)
        assert follow_up is not None

        await queue.fail(held, "a's attempt failed late")  # a, unaware
        stats = await queue.stats(detailed=True)
        assert stats["length"] == 1 and stats["dead"] == 0, stats
        assert (await marker(st, queue, b"stale") or b"").startswith(follow_up.encode() + b":")


async def test_a_reclaimed_job_counts_its_deliveries_behind_a_hundred_others(
    st: Stampede,
) -> None:
    """A consumer holding more than 100 jobs (concurrency above 100) takes over one more:
    its delivery count is read for that entry, not guessed as 1 (which let a job that
    kills its worker be taken over forever, never dead-lettered)."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    for n in range(101):
        assert await queue.enqueue(f"many:{n}", [f"many:{n}:a"], {}, "torn") is not None
    held = await queue.claim("w", 200)
    assert len(held) == 101
    last = max(held, key=lambda job: tuple(map(int, job.id.split("-"))))
    await st.topology.execute(  # idle past min_idle, as if its worker died
        last.stream, "XCLAIM", last.stream, CONSUMER_GROUP, "w", 0, last.id,
        "IDLE", queue.min_idle_ms + 1, "JUSTID",
    )  # fmt: skip
    (again,) = await queue.reclaim("w", 20)
    assert again.id == last.id and again.deliveries == 2


async def test_lag_counts_undelivered_jobs_after_an_out_of_order_ack(st: Stampede) -> None:
    """Jobs finish out of order: the newest delivered one is acked (and deleted) before
    an older one, then a job arrives. Redis reports the group's lag as null then (a
    deleted entry at its last-delivered id); `stats` read that as 0, so `queue stats`,
    the lag gauge and `--burst` saw no undelivered job while one waited."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    for name in ("lag:a", "lag:b"):
        await queue.enqueue(name, [f"{name}:k"], {}, "torn")
    _first, second = await queue.claim("w", 10)
    await queue.ack(second)  # the newer job finishes first
    await queue.enqueue("lag:c", ["lag:c:k"], {}, "torn")
    stats = await queue.stats()
    assert stats["lag"] == 1 and stats["pending"] == 1 and stats["length"] == 2, stats


async def test_an_enqueue_of_more_keys_is_followed_by_a_job_reading_them(st: Stampede) -> None:
    """A group's pending job reads the keys of the enqueue that queued it. A later
    enqueue naming more keys (a reader of more of the group) was told "already
    pending" and covered by nothing: no job ever read its extra keys. Its keys now
    join the waiting retry, or a follow-up job, whatever state the pending job is in,
    byte for byte (a key that is not UTF-8 included)."""
    queue = RepairQueue(st.topology, partitions=1)
    few, more = [b"kx:a", b"kx:\xff"], [b"kx:a", b"kx:\xff", b"kx:c"]

    async def next_keys() -> list[bytes]:
        (job,) = await queue.claim("w", 10)
        follow_up = await queue.ack(job)
        assert follow_up is not None
        (after,) = await queue.claim("w", 10)
        assert after.id == follow_up
        await queue.ack(after)
        return after.keys

    # not taken yet: the job reads only `few`
    await queue.clear()
    assert await queue.enqueue("kx", few, {}, "torn") is not None
    assert await queue.enqueue("kx", more, {}, "torn") is None
    assert await queue.enqueue("kx", few, {}, "torn") is None
    assert await next_keys() == more

    # taken: the marks' keys add up, the newest mark naming fewer keys
    await queue.clear()
    await queue.enqueue("kx", few, {}, "torn")
    (job,) = await queue.claim("w", 10)
    await queue.release(job)
    assert await queue.enqueue("kx", more, {}, "torn") is None
    assert await queue.enqueue("kx", few, {}, "torn") is None
    assert await next_keys() == more

    # taken and then failed: the retry reads the marks' keys
    await queue.clear()
    await queue.enqueue("kx", few, {}, "torn")
    (job,) = await queue.claim("w", 10)
    assert await queue.enqueue("kx", more, {}, "torn") is None
    assert not await queue.fail(job, "boom")
    (retry,) = await queue.claim("w", 10)
    assert retry.keys == more and retry.attempts == 1

    # a retry waiting for its delay: it reads the later enqueue's keys
    await queue.clear()
    await queue.enqueue("kx", few, {}, "torn")
    (job,) = await queue.claim("w", 10)
    assert not await queue.fail(job, "boom", delay=60)
    assert await queue.enqueue("kx", more, {}, "torn") is None
    (waiting,) = await queue.delayed()
    assert json.loads(waiting["keys"]) == [k.decode("utf-8", "surrogateescape") for k in more]
    await queue.clear()


async def test_a_job_waiting_past_the_marker_ttl_still_covers_an_enqueue(st: Stampede) -> None:
    """A backlog older than the marker TTL (an hour by default): every enqueue of a
    group whose job still waited, untaken, queued a second job for it, so the backlog
    grew with duplicates exactly when workers were behind. The waiting job reads the
    group later and covers it, however old; a job held past the TTL (a stuck worker)
    is still not trusted to."""
    queue = RepairQueue(st.topology, partitions=1, marker_ttl=0.2)
    await queue.clear()
    assert await queue.enqueue("old", ["old:a"], {}, "torn") is not None
    await asyncio.sleep(0.3)  # past the TTL (a lower bound, whatever the machine)
    assert await queue.enqueue("old", ["old:a"], {}, "torn") is None
    assert (await queue.stats())["length"] == 1
    assert len(await queue.claim("stuck", 10)) == 1
    await asyncio.sleep(0.3)
    assert await queue.enqueue("old", ["old:a"], {}, "torn") is not None
    assert (await queue.stats())["length"] == 2
    await queue.clear()
