"""Claiming jobs from the repair queue: taking over dead workers' jobs, exclusively,
counting only the deliveries that died, and draining past entries that are not jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from stampede import Stampede
from stampede.errors import ConfigurationError, InvalidKeyError
from stampede.repair import CONSUMER_GROUP, NewestWins, RepairQueue
from stampede.repair._queue import Job
from stampede.repair._worker import Worker

from ..support import Holding, eventually
from .test_worker import check_repaired, plant


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


class _Counted(RepairQueue):
    """A queue that counts its `claim` calls and sets `claimed` after each."""

    claims = 0

    async def claim(self, consumer: str, count: int = 16, **kw: Any) -> list[Job]:
        jobs = await super().claim(consumer, count, **kw)
        self.claims += 1
        return jobs


async def test_a_job_in_hand_that_looks_idle_is_not_claimed_again_by_its_worker(
    st: Stampede,
) -> None:
    """The worker's job in hand looks idle past min_idle (its touches fell behind: a
    busy loop, a short min_idle): the worker's own next claims took it over again and
    started a second repair of the same group beside the first."""
    queue = _Counted(st.topology, min_idle=30.0)
    await queue.clear()
    await plant(st, queue, 1)  # group w:0, torn
    strategy = Holding()
    worker = Worker(
        st.topology, queue, strategy, concurrency=4, poll_interval=0.01, block_ms=10,
        job_timeout=None, sweep_interval=0,
    )  # fmt: skip
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(strategy.entered.wait(), 30)
        (held,) = worker._held.values()  # noqa: SLF001 - the job the worker is repairing
        await abandon(st, queue, held, worker.consumer)  # idle past min_idle, still its own
        seen = queue.claims
        await eventually(lambda: _true(queue.claims >= seen + 3))
        assert strategy.calls == [b"w:0"]
    finally:
        strategy.release.set()
        worker.stop()
        await running
    assert strategy.calls == [b"w:0"] and worker.stats.counts()["done"] == 1


async def _true(value: bool) -> bool:
    return value


async def _no(name: str, listed: Awaitable[dict[str, int]]) -> bool:
    return name not in await listed


async def test_a_claim_never_returns_a_job_twice(st: Stampede) -> None:
    """Jobs the caller holds are left out of the take-over, and so are the ones the
    same claim just delivered; and a min_idle too short to keep a live worker's jobs
    its own is refused, naming the bound."""
    queue = RepairQueue(st.topology, partitions=1, min_idle=0.1)
    await queue.clear()
    for n in range(3):
        await queue.enqueue(f"once:{n}", [f"once:{n}:a"], {}, "torn")
    first = await queue.claim("w", 10)
    assert len({job.id for job in first}) == 3
    for job in first:
        await abandon(st, queue, job, "w")  # idle past min_idle, in the hands of "w"
    assert await queue.claim("w", 10, in_hand=[job.id for job in first]) == []
    again = await queue.claim("other", 10, in_hand=[first[0].id])
    assert sorted(job.id for job in again) == sorted(job.id for job in first[1:])
    assert [job.id for job in await queue.claim("other", 10)] == [first[0].id]
    with pytest.raises(ConfigurationError, match=r"min_idle must be at least 0\.1 s"):
        RepairQueue(st.topology, min_idle=0.001)


async def test_a_job_handed_back_on_every_stop_is_never_dead_lettered(st: Stampede) -> None:
    """Workers stopped with the job in hand (SIGTERM, grace over) hand it back; each
    hand-back counted as a delivery, and past max_attempts of them the next worker
    dead-lettered the job as one that "killed its worker", though nothing failed."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    expected = await plant(st, queue, 1)
    for _ in range(4):  # twice max_attempts restarts, each with the job in hand
        strategy = Holding()
        worker = Worker(
            st.topology, queue, strategy, poll_interval=0.01, block_ms=10, grace=0,
            job_timeout=None, sweep_interval=0,
        )  # fmt: skip
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(strategy.entered.wait(), 30)
        worker.stop()
        await running
        assert worker.stats.counts()["released"] == 1
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=10, sweep_interval=0,
        burst=True,
    )  # fmt: skip
    await asyncio.wait_for(worker.run(), 60)
    counts = worker.stats.counts()
    assert counts["dead_lettered"] == 0 and counts["repaired"] == 1, counts
    assert (await queue.stats())["dead"] == 0
    await check_repaired(st, expected)


async def test_a_late_hand_back_leaves_a_job_another_worker_took_over(st: Stampede) -> None:
    """Worker a looked dead and b took its job over; a, stopping, hands the job back:
    that made b's job in hand idle for a third worker to take (one job, two repairs)."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    await queue.enqueue("late", ["late:a"], {}, "torn")
    (held,) = await queue.claim("a", 10)
    await abandon(st, queue, held, "a")
    (taken,) = await queue.reclaim("b", 10)
    assert not await queue.release(held, "a")  # no longer a's
    assert await queue.reclaim("c", 10) == []  # b's, not idle
    assert await queue.release(taken, "b")
    (again,) = await queue.reclaim("c", 10)
    assert again.id == held.id and again.deliveries == 2  # a's death counts, b's stop not


async def test_the_dead_letter_stream_keeps_about_its_bound(st: Stampede) -> None:
    """Dead letters were kept for ever: the stream grew with every job that kept
    failing. It keeps about `dead_max_len` now, the newest."""
    queue = RepairQueue(st.topology, partitions=1, dead_max_len=10)
    await queue.clear()
    for n in range(300):
        await queue.enqueue(f"dl:{n}", [f"dl:{n}:a"], {}, "torn")
    jobs = await queue.claim("w", 300)
    assert len(jobs) == 300
    for job in jobs:
        await queue.dead_letter(job, "boom")
    length = int(await st.topology.execute(queue.dead, "XLEN", queue.dead))
    assert 10 <= length < 150, length  # approximate: whole nodes of old ones go
    newest = await queue.dead_letters(1)
    assert newest[0]["source_id"] == jobs[-1].id
    with pytest.raises(ConfigurationError, match="dead_max_len"):
        RepairQueue(st.topology, dead_max_len=0)


async def consumers(st: Stampede, stream: bytes) -> dict[str, int]:
    """The consumer group's consumers: name -> jobs held."""
    reply = await st.topology.execute(stream, "XINFO", "CONSUMERS", stream, CONSUMER_GROUP)
    out = {}
    for info in reply:
        fields = dict(zip(info[::2], info[1::2], strict=True)) if isinstance(info, list) else info
        out[fields[b"name"].decode()] = int(fields[b"pending"])
    return out


async def test_consumers_of_workers_that_are_gone_are_forgotten(st: Stampede) -> None:
    """Every worker that ever ran stayed listed in the consumer group (a new name per
    process): consumers that hold no job and were idle for `forget_after` are deleted,
    by `forget_consumers` and by a worker at its start; one holding a job is kept."""
    queue = RepairQueue(st.topology, partitions=1, forget_after=0.2)
    await queue.clear()
    stream = queue.streams[0]
    await queue.enqueue("fg:1", ["fg:1:a"], {}, "torn")
    assert len(await queue.claim("holder", 1)) == 1
    for name in ("gone-1", "gone-2"):  # workers that took jobs, acked them, and went
        await st.topology.execute(stream, "XGROUP", "CREATECONSUMER", stream, CONSUMER_GROUP, name)
    assert await consumers(st, stream) == {"holder": 1, "gone-1": 0, "gone-2": 0}

    async def idle_enough() -> bool:
        reply = await st.topology.execute(stream, "XINFO", "CONSUMERS", stream, CONSUMER_GROUP)
        return all(
            int((dict(zip(i[::2], i[1::2], strict=True)) if isinstance(i, list) else i)[b"idle"])
            >= 250
            for i in reply
        )

    await eventually(idle_enough)
    assert await queue.forget_consumers() == 2
    assert await consumers(st, stream) == {"holder": 1}

    await st.topology.execute(stream, "XGROUP", "CREATECONSUMER", stream, CONSUMER_GROUP, "gone-3")
    await eventually(idle_enough)
    worker = Worker(
        st.topology, queue, NewestWins(), consumer="new", poll_interval=0.01, block_ms=10,
        sweep_interval=0,
    )  # fmt: skip
    running = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: _no("gone-3", consumers(st, stream)))
    finally:
        worker.stop()
        await running
    assert "holder" in await consumers(st, stream)


MALFORMED = [  # entries another program wrote to the stream: none is a job
    ["group", "m:1", "keys", '["m:1:a"]', "delays", "[1" + "0" * 400 + "]"],  # OverflowError
    ["keys", '["m:2:a"]'],  # no group
    ["group", "m:3", "keys", '["\\ud800"]'],  # a key that is no text
    ["group", "m:4", "keys", '["m:4:a"]', "attempts", "1e3"],
    ["group", "m:5", "keys", "{}"],
]


async def test_burst_dead_letters_entries_that_are_not_jobs_and_drains_the_rest(
    st: Stampede,
) -> None:
    """An entry whose number overflows a float failed the whole claim (an exception
    the parser let through): the batch's jobs were stranded in the worker's name and a
    --burst worker, seeing nothing undelivered, stopped with them pending. Every such
    entry is dead-lettered now, the jobs beside it repaired, and burst stops only once
    its own name holds nothing."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    stream = queue.streams[0]
    for fields in MALFORMED:
        await st.topology.execute(stream, "XADD", stream, "*", *fields)
    expected = await plant(st, queue, 3)
    worker = Worker(
        st.topology, queue, NewestWins(), concurrency=4, poll_interval=0.01, block_ms=10,
        sweep_interval=0, burst=True,
    )  # fmt: skip
    await asyncio.wait_for(worker.run(), 60)
    stats = await queue.stats(detailed=True)
    assert stats["pending"] == 0 and stats["length"] == 0, stats
    assert stats["dead"] == len(MALFORMED)
    assert all(d["reason"] == "malformed" for d in await queue.dead_letters())
    assert worker.stats.counts()["dead_lettered"] == len(MALFORMED)
    await check_repaired(st, expected)


async def test_burst_takes_over_what_a_failed_claim_left_in_its_name(st: Stampede) -> None:
    """A claim that fails half-way (the shard went away after delivering) leaves jobs
    in the worker's name that it is not working on; burst waited for nothing
    undelivered and stopped. It now stays until it took them over (after min_idle)."""
    queue = RepairQueue(st.topology, partitions=1, min_idle=0.1)
    await queue.clear()
    expected = await plant(st, queue, 2)
    assert len(await queue.claim("burst", 10)) == 2  # delivered, then the claim "failed"
    worker = Worker(
        st.topology, queue, NewestWins(), consumer="burst", poll_interval=0.01, block_ms=10,
        sweep_interval=0, burst=True,
    )  # fmt: skip
    await asyncio.wait_for(worker.run(), 60)
    stats = await queue.stats()
    assert stats["pending"] == 0 and stats["length"] == 0, stats
    await check_repaired(st, expected)


async def test_a_worker_whose_clock_is_off_keeps_retry_delays_and_markers(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Due times and marker ages were the clients' clocks: a worker a minute slow put a
    failed job's 5 s retry in the past (claimable at once by any other worker), and an
    enqueuer two hours fast took a fresh job's marker for a stale one (a second job for
    the group). Both are the server's clock now."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    real = time.time
    first = await queue.enqueue("skew", ["skew:a"], {}, "torn")
    assert first is not None
    monkeypatch.setattr(time, "time", lambda: real() + 7200)  # an enqueuer 2 h fast
    assert await queue.enqueue("skew", ["skew:a"], {}, "torn") is None
    monkeypatch.setattr(time, "time", lambda: real() - 60)  # a worker a minute slow
    (job,) = await queue.claim("slow", 10)
    assert not await queue.fail(job, "boom", delay=5.0)
    monkeypatch.setattr(time, "time", real)
    assert await queue.claim("right", 10) == []  # the delay is not over for anyone
    (waiting,) = await queue.delayed()
    server = await st.topology.execute(queue.streams[0], "TIME")
    now = int(server[0]) + int(server[1]) / 1e6
    assert now + 4 <= waiting["due_at"] <= now + 5.5
    assert now + 4 <= float(waiting["retry_at"]) <= now + 5.5
    assert (await queue.stats())["length"] == 1


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("job_timeout", -1.0, "job_timeout must be at least 0"),
        ("poll_interval", 0.0, "poll_interval must be above 0"),
        ("health_interval", 0.0, "health_interval must be above 0"),
        ("block_ms", -5, "block_ms must be at least 0"),
        ("grace", -1.0, "grace must be at least 0"),
        ("concurrency", 0, "concurrency must be at least 1"),
    ],
)
async def test_worker_settings_out_of_range_are_refused(
    st: Stampede, setting: str, value: float, message: str
) -> None:
    """A negative job_timeout failed every attempt at once (every job dead-lettered);
    a poll or health interval of 0 spun against Redis; a negative block failed every
    claim. Each is a ConfigurationError naming the setting now, as is a marker TTL of
    0, which made every enqueue queue another job for the group."""
    queue = RepairQueue(st.topology)
    with pytest.raises(ConfigurationError, match=message):
        Worker(st.topology, queue, NewestWins(), **{setting: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="marker_ttl must be a number of seconds"):
        RepairQueue(st.topology, marker_ttl=0)


async def test_claims_take_turns_over_the_partitions(st: Stampede) -> None:
    """Every claim read the partitions in the same order and stopped once it had its
    count: while the first partition kept up with the workers, the jobs of the
    others waited for ever. Claims start from the next partition in turn now."""
    queue = RepairQueue(st.topology, partitions=4)
    await queue.clear()
    queued = dict.fromkeys(queue.streams, 0)
    n = 0
    while min(queued.values()) < 4:
        group = f"turn:{n}"
        n += 1
        stream = queue.stream_for(group.encode())
        if queued[stream] < 4:
            await queue.enqueue(group, [f"{group}:a"], {}, "torn")
            queued[stream] += 1
    served = []
    for _ in range(4):
        (job,) = await queue.claim("w", 1)
        served.append(job.stream)
    assert sorted(served) == sorted(queue.streams)


@pytest.mark.parametrize(
    ("group", "keys", "mode", "error", "message"),
    [
        ("bad", [], None, InvalidKeyError, "names no keys"),
        ("bad", "bad:a", None, InvalidKeyError, "must be a list of key names"),
        ("", ["bad:a"], None, InvalidKeyError, "group name is empty"),
        ("bad", ["bad:a", 7], None, InvalidKeyError, "int"),
        ("bad", ["bad:a"], "stmp", ConfigurationError, "'stamp' or 'commit', got 'stmp'"),
    ],
)
async def test_an_enqueue_of_no_job_is_refused_and_queues_nothing(
    st: Stampede, group: str, keys: Any, mode: str | None, error: type[Exception], message: str
) -> None:
    """An enqueue with no keys, or one key string (queued as a job whose keys were
    its characters), or a misspelt mode (the worker silently used its own) was
    accepted, to be repaired wrong or dead-lettered later. Each is refused at once,
    naming what is wrong, and nothing is queued."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    with pytest.raises(error, match=message):
        await queue.enqueue(group, keys, {}, "torn", mode=mode)
    assert (await queue.stats())["length"] == 0
