"""The repair queue attacked: stream entries deleted by hand, a worker named as the
queue's own bookkeeping, replies lost on the queue's scripts, a requeue racing a
publish; each driven through the real servers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stampede import Stampede
from stampede.errors import ConfigurationError, ShardUnavailable
from stampede.repair import CONSUMER_GROUP, NewestWins, RepairQueue
from stampede.repair import _queue_admin as _admin
from stampede.repair._jobs import HANDED_BACK
from stampede.repair._worker import Worker
from stampede.testing import LocalPrimaries
from stampede.testing.faults import DelegatingTopology, InjectedCrash

from ..support import eventually, run_cli
from .test_lost_replies import Proxied, px  # noqa: F401 - the proxied fixture
from .test_queue_review import BeforeScript, DiesAfter, _burst, _drop_script_reply


async def test_a_worker_may_not_take_the_hand_back_consumers_name(
    st: Stampede, stampede_primaries: LocalPrimaries
) -> None:
    """A job handed back on stop is held by the consumer `released` until a worker takes
    it over. A worker named `released` counted every other worker's hand-backs as its
    own (a burst worker found them stranded in its name; after a claim whose reply was
    lost it took them in hand while another worker took them over: one job run twice).
    The name is refused now, by the Worker, the queue's calls and the CLI."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("handed", ["handed:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    assert await queue.release(job, "a")
    (stream,) = queue.streams
    held = await st.topology.execute(stream, "XPENDING", stream, CONSUMER_GROUP, "-", "+", 10)
    assert [h[1].decode() for h in held] == [HANDED_BACK]
    with pytest.raises(ConfigurationError, match="reserved"):
        Worker(st.topology, queue, NewestWins(), consumer=HANDED_BACK)
    with pytest.raises(ConfigurationError, match="reserved"):
        await queue.claim(HANDED_BACK, 1)
    with pytest.raises(ConfigurationError, match="reserved"):
        await queue.fail(job, "boom", holder=HANDED_BACK)
    (again,) = await queue.claim("b", 1)  # the hand-back is any worker's to take
    assert again.id == job.id and again.deliveries == 1
    await queue.ack(again)
    args = ["worker", "--url", stampede_primaries.urls[0], "--strategy", "newest-wins"]
    result = await asyncio.to_thread(run_cli, *args, "--consumer", HANDED_BACK, "--burst")
    err = result.stderr.decode()
    assert result.returncode == 2, err[-2000:]
    assert "--consumer" in err and "reserved" in err and "Traceback" not in err


@pytest.mark.parametrize("delay", [0.0, 30.0])  # a retry at once; one that waits
async def test_a_retry_whose_reply_was_lost_is_resent_and_queued_once(
    px: Proxied,  # noqa: F811
    delay: float,
) -> None:
    """The retry of a failed job ran and its reply was lost: it was never resent, so the
    worker logged `OutcomeUnknownError` for a retry that was queued (and a resend would
    have found the job gone, "taken over"). Each call keeps a receipt of what it did:
    it is resent, reports the retry, and one job is queued."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")  # the retry script is loaded
    (warm,) = await queue.claim("w", 1)
    assert await queue.fail(warm, "warming up", holder="w") is False
    (warm,) = await queue.claim("w", 1)
    await queue.ack(warm)
    await queue.enqueue("lost", ["lost:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    rule = _drop_script_reply(px, queue.streams[0], "queue_retry")
    assert await queue.fail(job, "boom", delay=delay, holder="w") is False
    assert rule.hits == 1
    stats = await queue.stats(detailed=True)
    assert stats["length"] == 1 and stats["pending"] == 0, stats
    assert stats["delayed"] == (1 if delay else 0), stats
    if not delay:
        (again,) = await queue.claim("w", 10)
        assert again.group == b"lost" and again.attempts == 1
        assert await queue.claim("w", 10) == []


async def test_a_hand_back_whose_reply_was_lost_is_resent_and_done_once(
    px: Proxied,  # noqa: F811
) -> None:
    """A worker stopping hands its job back and the reply is lost: it raised
    `OutcomeUnknownError` (a resend would have taken back the delivery count twice).
    The hand-back is resent now, finds its receipt and reports the job handed back;
    the next worker takes it at once with its delivery count as before the claim."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")  # the release script is loaded
    (warm,) = await queue.claim("w", 1)
    assert await queue.release(warm, "w")
    (warm,) = await queue.claim("w", 1)
    await queue.ack(warm)
    await queue.enqueue("lost", ["lost:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    rule = _drop_script_reply(px, queue.streams[0], "queue_release")
    assert await queue.release(job, "a") is True
    assert rule.hits == 1
    (stream,) = queue.streams
    receipts = await st.topology.execute(stream, "KEYS", b"*receipt*")
    assert len(receipts) == 2  # the warm-up's, this one's: each expires
    for receipt in receipts:
        assert 0 < await st.topology.execute(stream, "PTTL", receipt) <= 600_000
    (again,) = await queue.claim("b", 1)
    assert again.id == job.id and again.deliveries == 1
    await queue.ack(again)
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}


async def _marker(st: Stampede, queue: RepairQueue, group: bytes) -> bytes | None:
    (stream,) = queue.streams
    key = queue.pending_key(stream)
    marker: bytes | None = await st.topology.execute(key, "HGET", key, group)
    return marker


async def test_a_stray_marker_of_an_entry_deleted_by_hand_is_collected(st: Stampede) -> None:
    """Another program deleted a job's stream entry (`XDEL`) before any worker took it:
    the group's marker stayed for ever (nothing else enqueued the group), and an
    enqueue after it replaced it with its own keys only, dropping those of the
    enqueues marked on it. Now the enqueue's job covers them too, and the workers'
    collection (at start and every minute) deletes a marker left alone."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    first = await queue.enqueue("g", ["g:a"], {}, "torn")
    assert await queue.enqueue("g", ["g:a", "g:b"], {}, "torn") is None  # marked on it
    await st.topology.execute(stream, "XDEL", stream, first)
    assert await queue.enqueue("g", ["g:c"], {}, "torn") is not None
    (job,) = await queue.claim("w", 10)
    assert sorted(job.keys) == [b"g:a", b"g:b", b"g:c"]
    await queue.ack(job)
    lone = await queue.enqueue("h", ["h:a"], {}, "torn")
    await st.topology.execute(stream, "XDEL", stream, lone)
    assert await _admin.collect_markers(queue) == 1
    assert await _admin.collect_markers(queue) == 0  # collected once
    assert not await st.topology.execute(stream, "EXISTS", queue.pending_key(stream))
    assert await queue.enqueue("h", ["h:a"], {}, "torn") is not None


async def test_a_stray_marker_of_a_taken_job_keeps_its_promise(st: Stampede) -> None:
    """A worker took a job and died; another program deleted its entry; an enqueue then
    found the job taken and was told "pending" (a follow-up promised by the job's ack).
    The take-over dropped the entry, gone from the stream, and the marker with the
    promise stayed: no repair came after that enqueue, and the group's next enqueues
    were marked on a job that no longer was, until the marker TTL. The collection now
    keeps the promise (a job with the marked fields) and ends the marker."""
    queue = RepairQueue(st.topology, partitions=1, min_idle=0.1)
    await queue.clear()
    (stream,) = queue.streams
    await queue.enqueue("g", ["g:a"], {}, "torn")
    (job,) = await queue.claim("dead-worker", 1)
    await st.topology.execute(stream, "XDEL", stream, job.id)
    assert await queue.enqueue("g", ["g:b"], {}, "torn") is None  # promised a follow-up
    assert await _admin.collect_markers(queue) == 0  # still held: its holder's to end
    await st.topology.execute(  # the worker is dead: its job idle past min_idle
        stream, "XCLAIM", stream, CONSUMER_GROUP, "dead-worker", 0, job.id,
        "IDLE", queue.min_idle_ms + 1, "JUSTID",
    )  # fmt: skip
    assert await queue.claim("w", 10) == []  # the take-over drops the entry
    assert await _admin.collect_markers(queue) == 1
    (follow_up,) = await queue.claim("w", 10)
    assert follow_up.group == b"g" and b"g:b" in follow_up.keys
    await queue.ack(follow_up)
    assert await _marker(st, queue, b"g") is None
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}


async def test_a_retry_whose_schedule_was_deleted_by_hand_is_not_lost(st: Stampede) -> None:
    """A retry waiting for its delay whose member of the delayed set another program
    removed: its fields stayed in the retries hash for ever, and its marker too. The
    collection puts the retry on the stream (a job that was owed) and re-points the
    marker at it."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    await queue.enqueue("g", ["g:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=3600) is False
    delayed = queue.delayed_key(stream)
    await st.topology.execute(delayed, "ZREM", delayed, b"g")
    assert await _admin.collect_markers(queue) == 1
    (again,) = await queue.claim("w", 10)
    assert again.group == b"g" and again.attempts == 1
    await queue.ack(again)
    for key in queue.side_keys(stream)[1:]:
        assert not await st.topology.execute(key, "EXISTS", key), key


async def test_a_worker_collects_stray_markers_at_start(st: Stampede) -> None:
    """A worker collects the stray markers when it starts (then every minute)."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    lone = await queue.enqueue("h", ["h:a"], {}, "torn")
    await st.topology.execute(stream, "XDEL", stream, lone)
    worker = Worker(st.topology, queue, NewestWins(), poll_interval=0.01, sweep_interval=0)
    running = asyncio.create_task(worker.run())
    try:

        async def collected() -> bool:
            return await _marker(st, queue, b"h") is None

        await eventually(collected)
    finally:
        worker.stop()
        await running


async def test_a_requeue_racing_a_publish_of_the_same_parked_copy_leaves_one_job(
    st: Stampede,
) -> None:
    """A worker died after publishing a dead letter, before deleting its parked copy;
    a claim read that copy to publish it (a no-op while the dead letter is there) and,
    in the milliseconds before it did, a requeue of the dead letter ran to its end:
    queued the job anew, deleted the copy and the dead letter, and the sources set
    forgot the job. The claim's publish then added the dead letter again: one job both
    queued and a dead letter. The requeue now holds the job's source off for ten
    minutes, in the dead letters' slot, and the late publish adds nothing."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=1, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("raced", ["raced:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    dying = DiesAfter(st.topology, {"queue_bury"})
    with pytest.raises(InjectedCrash):
        await RepairQueue(dying, partitions=1, max_attempts=1).dead_letter(job, "boom", 1)
    requeued: list[dict[str, str]] = []

    async def requeue() -> None:
        requeued.extend(await queue.requeue_dead())

    racing = BeforeScript(st.topology, {"queue_bury"}, requeue)
    claimer = RepairQueue(racing, partitions=1, max_attempts=1, min_idle=0.1)

    async def published_after_the_requeue() -> bool:
        await claimer.promote()  # publishes the copy once parked past min_idle
        return racing.fired

    await eventually(published_after_the_requeue)
    assert [r["outcome"] for r in requeued] == ["queued"]
    assert await queue.dead_letters() == []
    stats = await queue.stats(detailed=True)
    assert stats == {"length": 1, "pending": 0, "lag": 1, "dead": 0, "delayed": 0}, stats
    (again,) = await queue.claim("b", 10)
    await queue.ack(again)
    requeued_set = _admin.requeued_key(queue)
    assert 0 < await st.topology.execute(requeued_set, "PTTL", requeued_set) <= 600_000


async def test_a_parked_copy_read_too_long_ago_is_left_for_the_next_claim(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish whose parked copies were read half the requeue hold ago or more (a
    process paused between) publishes none of them: a requeue meanwhile may be
    forgotten by then. They stay parked, and a claim reads them afresh."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=1, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("late", ["late:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    monkeypatch.setattr(_admin, "REQUEUED_HOLD_MS", 0)  # every read is too old
    await queue.dead_letter(job, "boom", 1)
    assert await queue.dead_letters() == [] and (await queue.stats())["dead"] == 1
    monkeypatch.undo()

    async def published() -> bool:
        await queue.promote()
        return len(await queue.dead_letters()) == 1

    await eventually(published)
    assert (await queue.stats())["dead"] == 1


async def test_a_claim_whose_take_over_reply_was_lost_hands_over_every_job(
    px: Proxied,  # noqa: F811
) -> None:
    """A claim read a new job, then its take-over of a dead worker's job ran and lost
    its reply: the claim raised `OutcomeUnknownError`, and both jobs stayed held in
    the worker's name unknown to it, taken over only after `min_idle` with a delivery
    counted as a worker's death (a few such losses dead-lettered a job never tried).
    The claim now hands over both: what the take-over took is read back, as after a
    lost XREADGROUP."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")
    await queue.claim("x", 1)
    assert await queue.reclaim("x", 1) == []  # the reclaim script is loaded
    (stream,) = queue.streams
    ((held, *_),) = await st.topology.execute(
        stream, "XPENDING", stream, CONSUMER_GROUP, "-", "+", 1
    )
    await st.topology.execute(  # x is dead: its job idle past min_idle
        stream, "XCLAIM", stream, CONSUMER_GROUP, "x", 0, held,
        "IDLE", queue.min_idle_ms + 1, "JUSTID",
    )  # fmt: skip
    await queue.enqueue("new", ["new:a"], {}, "torn")
    rule = _drop_script_reply(px, stream, "queue_reclaim")
    jobs = await queue.claim("w", 10)
    assert rule.hits == 1
    assert sorted(j.group for j in jobs) == [b"new", b"warm"]
    assert [j.deliveries for j in sorted(jobs, key=lambda j: j.group)] == [1, 2]
    for job in jobs:
        await queue.ack(job)
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}


async def test_a_claim_whose_promote_reply_was_lost_goes_on(px: Proxied) -> None:  # noqa: F811
    """The call moving due retries onto the stream ran and lost its reply: the whole
    claim raised `OutcomeUnknownError`. It is resent now (a second run does what the
    next claim's would), and the claim hands over the retry it moved."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("g", ["g:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=0.001) is False
    (waiting,) = [float(w["due_at"]) for w in await queue.delayed()]
    (stream,) = queue.streams

    async def due() -> bool:  # by the server's clock, which the due time is set by
        seconds, micros = await st.topology.execute(stream, "TIME")
        return int(seconds) + int(micros) / 1e6 >= waiting

    await eventually(due)
    rule = _drop_script_reply(px, stream, "queue_promote")
    (again,) = await queue.claim("w", 10)
    assert rule.hits == 1
    assert again.group == b"g" and again.attempts == 1
    await queue.ack(again)
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}


class DownFor(DelegatingTopology):
    """A topology whose commands on one key (`down`) fail: that key's shard is down."""

    def __init__(self, inner: Any, down: bytes) -> None:
        super().__init__(inner)
        self.down = down

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        if key == self.down:
            raise ShardUnavailable("the shard is down", shard="down")
        return await self.inner.execute(key, *args, resend=resend)


async def test_a_claim_failing_on_a_later_partition_hands_over_what_it_read(
    st: Stampede,
) -> None:
    """A claim read a job from one partition, then the next partition's shard failed:
    the claim raised, and the job it had read stayed held in the worker's name unknown
    to it, taken over after `min_idle` with a delivery counted as a worker's death.
    The claim now returns the jobs it read (the error comes again next claim)."""
    queue = RepairQueue(st.topology, partitions=2)
    await queue.clear()
    for n in range(2):  # a job in each partition
        group = next(
            f"g{i}" for i in range(100) if queue.stream_for(f"g{i}".encode()) == queue.streams[n]
        )
        await queue.enqueue(group, [f"{group}:a"], {}, "torn")
    first, second = queue.streams
    down = RepairQueue(DownFor(st.topology, second), partitions=2)  # starts at the first
    (job,) = await down.claim("w", 10)
    assert job.stream == first
    with pytest.raises(ShardUnavailable):  # nothing to hand over: the error comes
        await down.claim("w", 10)
    await queue.ack(job)
    (other,) = await queue.claim("w", 10)  # the shard is back
    assert other.stream == second
    await queue.ack(other)


async def test_a_dead_letter_whose_tidy_up_reply_was_lost_is_counted_once(
    px: Proxied,  # noqa: F811
) -> None:
    """A dead letter was decided and published, and the reply to deleting its parked
    copy (`HDEL`) was lost: `OutcomeUnknownError` escaped the dead letter already made,
    so the worker recorded a failure of it, found it no longer its own and counted it
    "taken over". The delete is resent (running it twice does what once does), and a
    lost publish leaves the copy for the next claim: one dead letter, counted once."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    await st.topology.execute(stream, "XADD", stream, "*", "group", "m", "keys", "{}")
    rule = px.proxy_for(stream.decode()).drop_reply(lambda cmd: cmd[0].upper() == b"HDEL")
    stats = await _burst(st, queue)
    assert rule.hits == 1
    assert stats.dead_lettered == 1 and not stats.errors, stats.as_dict()
    assert len(await queue.dead_letters()) == 1
    assert (await queue.stats())["dead"] == 1  # no copy left parked


async def test_an_enqueue_whose_group_creation_reply_was_lost_goes_on(
    px: Proxied,  # noqa: F811
) -> None:
    """The first call on a partition creates its consumer group (`XGROUP CREATE
    MKSTREAM`); its reply lost, the enqueue raised `OutcomeUnknownError` (a read
    repaired with `Enqueue` failed). Sent again, it finds the group made (BUSYGROUP),
    and the enqueue goes on."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    rule = px.proxy_for(stream.decode()).drop_reply(
        lambda cmd: cmd[0].upper() == b"XGROUP" and cmd[1].upper() == b"CREATE"
    )
    assert await queue.enqueue("g", ["g:a"], {}, "torn") is not None
    assert rule.hits == 1
    (job,) = await queue.claim("w", 1)
    await queue.ack(job)


async def test_a_marker_written_by_another_program_blocks_nothing(st: Stampede) -> None:
    """A marker whose entry id is not one (another program's value in the marker hash)
    made every enqueue of its group fail with the server's `Invalid stream ID`, and a
    retry of the group due with it failed every claim's promotion of that partition:
    its retries never came. Such a marker now stands for no job: the enqueue adds
    one, the retry is promoted, and the collection deletes a marker left alone."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    markers = queue.pending_key(stream)
    await queue.enqueue("r", ["r:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=0.001) is False  # a retry waits
    await st.topology.execute(markers, "HSET", markers, "g", "not-an-id:1", "r", "junk:1")
    assert await queue.enqueue("g", ["g:a"], {}, "torn") is not None

    groups: set[bytes] = set()

    async def both_claimed() -> bool:
        for claimed in await queue.claim("w", 10):
            groups.add(claimed.group)
            await queue.ack(claimed)
        return groups == {b"g", b"r"}

    await eventually(both_claimed)
    await st.topology.execute(markers, "HSET", markers, "h", "junk:1")
    assert await _admin.collect_markers(queue) == 1
    assert not await st.topology.execute(markers, "EXISTS", markers)


async def test_fields_written_by_another_program_fail_no_call(st: Stampede) -> None:
    """A retry's fields, a mark's or a parked dead letter's that are not a JSON array of
    strings (another program's value) failed the call that read them on every run: an
    enqueue of the group, every promotion or publish of the partition (its retries and
    dead letters stuck behind). Each is now read as a malformed job, which a worker
    dead-letters where it can be seen, and the calls go on."""
    queue = RepairQueue(st.topology, partitions=1, min_idle=0.1)
    await queue.clear()
    (stream,) = queue.streams
    markers, retries = queue.pending_key(stream), queue.retries_key(stream)
    dying = queue.dying_key(stream)
    await queue.enqueue("r", ["r:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=0.001) is False  # a retry waits
    await st.topology.execute(retries, "HSET", retries, "r", '{"not": "a list"}')
    await st.topology.execute(markers, "HSET", markers, "m", "1-1:1:1:[1, 2")
    await st.topology.execute(dying, "HSET", dying, "1-1", "1 not json")
    assert await queue.enqueue("m", ["m:a"], {}, "torn") is not None

    async def drained() -> bool:
        for claimed in await queue.claim("w", 10):
            if claimed.keys:
                await queue.ack(claimed)
            else:
                await queue.dead_letter(claimed, "malformed")
        stats = await queue.stats(detailed=True)
        return stats["length"] == 0 and stats["pending"] == 0 and stats["dead"] == 2

    await eventually(drained)
    letters = {d["group"]: d for d in await queue.dead_letters()}
    assert letters["r"]["reason"] == "malformed"  # the retry's fields were not fields
    assert letters["?"]["raw"] == "not json"  # the parked dead letter, kept as it was


async def test_a_retry_outliving_its_marker_is_not_dropped_for_a_narrower_job(
    st: Stampede,
) -> None:
    """A retry waited longer than the marker TTL (a long `--retry-max-delay`); an
    enqueue of other keys of its group then found the marker stale and queued its own
    job. When the retry came due it was dropped, "that job reads the group later": but
    that job did not read the keys only the retry held, which were never repaired.
    The retry is dropped now only when the other job's keys hold all of its own."""
    queue = RepairQueue(st.topology, partitions=1, marker_ttl=0.001)
    await queue.clear()
    (stream,) = queue.streams
    await queue.enqueue("g", ["g:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=0.05) is False
    (waiting,) = [float(w["due_at"]) for w in await queue.delayed()]

    async def due() -> bool:  # by the server's clock: past the marker TTL, and due
        seconds, micros = await st.topology.execute(stream, "TIME")
        return int(seconds) + int(micros) / 1e6 >= waiting

    await eventually(due)
    assert await queue.enqueue("g", ["g:c"], {}, "torn") is not None  # the marker is stale
    jobs = await queue.claim("w", 10)
    assert sorted(k for j in jobs for k in j.keys) == [b"g:a", b"g:c"]
    for claimed in jobs:
        await queue.ack(claimed)
    assert await queue.stats(detailed=True) == {
        "length": 0, "pending": 0, "lag": 0, "dead": 0, "delayed": 0,
    }  # fmt: skip


async def test_a_retry_with_neither_schedule_nor_marker_is_not_kept_for_ever(
    st: Stampede,
) -> None:
    """A waiting retry whose delayed-set member and marker another program deleted: its
    fields stayed in the retries hash for ever, a job owed and never run. The
    collection puts it on the stream, with a marker."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    (stream,) = queue.streams
    await queue.enqueue("g", ["g:a"], {}, "torn")
    (job,) = await queue.claim("w", 1)
    assert await queue.fail(job, "boom", delay=3600) is False
    delayed, markers = queue.delayed_key(stream), queue.pending_key(stream)
    await st.topology.execute(delayed, "DEL", delayed)
    await st.topology.execute(markers, "DEL", markers)
    assert await _admin.collect_markers(queue) == 1
    assert await _marker(st, queue, b"g") is not None
    (again,) = await queue.claim("w", 10)
    assert again.group == b"g" and again.attempts == 1
    await queue.ack(again)
    for key in queue.side_keys(stream)[1:]:
        assert not await st.topology.execute(key, "EXISTS", key), key
