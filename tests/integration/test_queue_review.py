"""The repair queue and worker under review: waiting on undecided transactions, dead
letters that happen once, late workers, requeue past malformed dead letters, a queue
key of another type and consumer names, each driven through the real servers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from stampede import Stampede
from stampede._lua import Script, script
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.write import run_units
from stampede.errors import ConfigurationError, InvalidKeyError
from stampede.repair import CONSUMER_GROUP, NewestWins, RepairQueue, RetryBackoff, _worker_record
from stampede.repair._queue import Job
from stampede.repair._worker import Worker
from stampede.repair._worker_stats import WorkerStats
from stampede.testing import LocalPrimaries
from stampede.testing.faults import DelegatingTopology, InjectedCrash
from stampede.testing.proxy import ProxyRule
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import Holding, eventually, run_cli, spread_keys
from .test_lost_replies import Proxied, px  # noqa: F401 - the proxied fixture
from .test_worker import plant


class BeforeScript(DelegatingTopology):
    """Runs `before()` once, just before the first call of a script named in `names`."""

    def __init__(self, inner: Any, names: set[str], before: Callable[[], Awaitable[None]]):
        super().__init__(inner)
        self.names, self.before = names, before
        self.fired = False

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.name in self.names and not self.fired:
            self.fired = True
            await self.before()
        return await self.inner.script(script, keys, args)


async def take_over_and_finish(st: Stampede, queue: RepairQueue, job_id: str) -> None:
    """Worker b takes job `job_id` over (as after its worker looked dead) and acks it."""
    (stream,) = queue.streams
    await st.topology.execute(stream, "XCLAIM", stream, CONSUMER_GROUP, "b", 0, job_id, "JUSTID")
    job = Job(job_id, stream, b"?", [], {}, "torn", 0.0, 0)
    await queue.ack(job)


class FailsWhenReleased(Holding):
    """Holds each repair until `release`, then fails it."""

    async def repair(self, ctx: Any, obs: Any, verdict: Any) -> Any:
        self.calls.append(obs.group)
        self.entered.set()
        await self.release.wait()
        raise ConnectionError("the database is unreachable")


async def test_an_empty_consumer_name_is_refused(
    st: Stampede, stampede_primaries: LocalPrimaries
) -> None:
    """`Worker(consumer="")` and `stampede worker --consumer ''` fell back to the default
    name (host-pid) silently; both refuse it now, the CLI with exit 2 and no traceback."""
    queue = RepairQueue(st.topology)
    with pytest.raises(ConfigurationError, match="consumer name"):
        Worker(st.topology, queue, NewestWins(), consumer="")
    args = ["worker", "--url", stampede_primaries.urls[0], "--strategy", "newest-wins"]
    result = await asyncio.to_thread(run_cli, *args, "--consumer", "", "--burst", timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 2, err[-2000:]
    assert "--consumer" in err and "empty" in err and "Traceback" not in err


@pytest.mark.parametrize("which", ["stream", "delayed"])
async def test_a_worker_on_a_queue_key_of_another_type_stops_with_a_clear_error(
    st: Stampede, which: str
) -> None:
    """Another program's key under one of the queue's names: the library's worker
    logged `worker.claim_failed` and tried again for ever (the CLI refused it at
    start). `run()` now raises InvalidKeyError naming the key and what to do."""
    queue = RepairQueue(st.topology, name="other:repairs", partitions=1)
    await queue.clear()
    key = queue.streams[0] if which == "stream" else queue.delayed_key(queue.streams[0])
    await st.topology.execute(key, "HSET", key, "field", "value")
    try:
        worker = Worker(st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0)
        with pytest.raises(InvalidKeyError, match="holds another type") as caught:
            await asyncio.wait_for(worker.run(), timeout=60)
        assert key.decode() in str(caught.value) and "another name" in str(caught.value)
    finally:
        await st.topology.execute(key, "DEL", key)


async def test_requeue_all_with_a_count_goes_on_past_malformed_dead_letters(
    st: Stampede, stampede_primaries: LocalPrimaries
) -> None:
    """`requeue --all --count N` took the N oldest dead letters: N malformed ones (kept,
    as they are) blocked every later one for ever. It now reports them and goes on
    until N dead letters are requeued or none is left."""
    queue = RepairQueue(st.topology, max_attempts=1)
    await queue.clear()
    dead = queue.dead
    for n in range(3):
        await st.topology.execute(dead, "XADD", dead, "*", "group", f"junk{n}")
    for n in range(3):
        await queue.enqueue(f"good{n}", [f"good{n}:a"], {}, "torn")
    for job in await queue.claim("w", 10):
        assert await queue.fail(job, "boom")  # dead at once
    results = await queue.requeue_dead(count=2)
    assert [r["outcome"] for r in results] == ["malformed"] * 3 + ["queued"] * 2
    assert (await queue.stats())["dead"] == 4
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    if st.topology.slot_bound:
        return  # the CLI below runs against the primaries' queue
    result = await asyncio.to_thread(
        run_cli, "queue", "requeue", *urls, "--all", "--count", "2", timeout=60
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"3 malformed, 1 queued" in result.stdout


async def test_a_late_dead_letter_of_a_job_another_worker_finished_is_not_counted(
    st: Stampede,
) -> None:
    """Worker a is about to dead-letter a job (an entry that is not a job) when worker b,
    which took it over, finishes it: a counted and logged a dead letter that never was.
    Now a counts nothing and no dead letter is written."""
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("ok", ["ok:a"], {}, "torn")
    (job,) = await queue.claim("x", 1)
    await queue.ack(job)  # the stream and its group exist
    (stream,) = queue.streams
    eid = await st.topology.execute(stream, "XADD", stream, "*", "group", "m", "keys", "{}")
    eid = eid.decode()
    hooked = BeforeScript(st.topology, {"queue_dead"}, lambda: take_over_and_finish(st, queue, eid))
    late = RepairQueue(hooked, partitions=1)
    worker = Worker(
        hooked, late, NewestWins(), consumer="a", poll_interval=0.01, block_ms=0,
        sweep_interval=0, burst=True,
    )  # fmt: skip
    stats = await asyncio.wait_for(worker.run(), 60)
    assert hooked.fired
    assert stats.dead_lettered == 0 and stats.failed == 0, stats.counts()
    assert (await queue.stats())["dead"] == 0


@pytest.mark.parametrize("max_attempts", [1, 5])  # a dead letter; a retry
async def test_a_late_failure_of_a_job_another_worker_finished_is_not_counted(
    st: Stampede, max_attempts: int
) -> None:
    """Worker a's attempt fails after worker b took the job over and finished it: a
    counted a retry (or a dead letter) and logged `job.failed` for a job no longer
    its own. Now it counts neither, and nothing is queued or dead-lettered."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=max_attempts)
    await queue.clear()
    await plant(st, queue, 1)  # one torn group
    strategy = FailsWhenReleased()
    worker = Worker(
        st.topology, queue, strategy, consumer="a", poll_interval=0.01, block_ms=0,
        sweep_interval=0,
    )  # fmt: skip
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(strategy.entered.wait(), 60)
        pending = await st.topology.execute(
            queue.streams[0], "XPENDING", queue.streams[0], CONSUMER_GROUP, "-", "+", 1
        )
        await take_over_and_finish(st, queue, pending[0][0].decode())
        strategy.release.set()
        stats = worker.stats

        async def attempted() -> bool:
            return not worker.stats.in_hand and worker.stats.errors.get("repair", 0) == 1

        await eventually(attempted)
    finally:
        worker.stop()
        await running
    assert stats.failed == 0 and stats.dead_lettered == 0, stats.counts()
    assert await queue.stats(detailed=True) == {
        "length": 0, "pending": 0, "lag": 0, "dead": 0, "delayed": 0,
    }  # fmt: skip


class DiesAfter(DelegatingTopology):
    """A worker that dies right after the first call of a step named in `steps` (a
    script's name, or `xadd_dead` for an XADD to a dead-letter stream): the call is
    applied, its caller never learns of it."""

    def __init__(self, inner: Any, steps: set[str]):
        super().__init__(inner)
        self.steps = steps
        self.died = False

    def _maybe_die(self, step: str) -> None:
        if step in self.steps and not self.died:
            self.died = True
            raise InjectedCrash(step)

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        reply = await self.inner.script(script, keys, args)
        self._maybe_die(script.name)
        return reply

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        reply = await self.inner.execute(key, *args, resend=resend)
        if args and args[0] == "XADD" and key.endswith(b":dead"):
            self._maybe_die("xadd_dead")
        return reply


@pytest.mark.parametrize("steps", [{"xadd_dead", "queue_dead"}, {"queue_bury"}])
async def test_a_worker_that_dies_while_dead_lettering_leaves_one_dead_letter(
    st: Stampede, steps: set[str]
) -> None:
    """Dead-lettering was two steps, XADD to the dead stream then ack: a worker that
    died between them left the job dead-lettered and pending, and the worker that
    took it over dead-lettered it again. However far the first worker got, the job
    now ends as one dead letter, nothing pending."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=1, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("dies", ["dies:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    dying = DiesAfter(st.topology, steps)
    with pytest.raises(InjectedCrash):
        await RepairQueue(dying, partitions=1, max_attempts=1).dead_letter(job, "boom", 1)
    assert dying.died
    (stream,) = queue.streams
    await st.topology.execute(  # a is dead: its jobs idle past min_idle
        stream, "XCLAIM", stream, CONSUMER_GROUP, "a", 0, job.id,
        "IDLE", queue.min_idle_ms + 1, "JUSTID",
    )  # fmt: skip
    for again in await queue.claim("b", 10):  # b takes over what a left, if anything
        assert again.id == job.id and again.deliveries == 2
        await queue.dead_letter(again, "its worker died while dead-lettering it")

    async def published() -> bool:  # what a left parked, once parked past min_idle
        await queue.promote()
        return (await queue.stats())["dead"] == 1 and len(await queue.dead_letters()) == 1

    await eventually(published)
    letters = await queue.dead_letters()
    assert [d["source_id"] for d in letters] == [job.id], letters
    stats = await queue.stats(detailed=True)
    assert stats == {"length": 0, "pending": 0, "lag": 0, "dead": 1, "delayed": 0}, stats


async def undecided_group(
    st: Stampede, name: str
) -> tuple[list[str], Callable[[], Awaitable[None]]]:
    """A torn group whose keys hold a transaction T prepared at both, committed nowhere
    yet (its writer is between its rounds): a repair leaves it alone until T is
    decided. Returns the keys and the commit of T."""
    a, b = spread_keys(st, name, 2)
    async with st.transaction() as tx:
        tx.set(a, b"a0")
        tx.set(b, b"b0")
    async with st.transaction() as tx:
        tx.set(b, b"b1")  # torn: a and b hold different writes
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:t" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]

    async def commit() -> None:
        done = [(version, token, 0)] * 2
        assert await run_units(st.topology, COMMIT, raw, sides, done, head=[5000]) == [1, 1]

    return [a, b], commit


async def test_a_job_waiting_on_an_undecided_transaction_is_not_dead_lettered(
    st: Stampede,
) -> None:
    """A job whose group holds a transaction still committing (decided within 60 s) is
    no failure: it burnt its attempts in seconds and was dead-lettered. It is put off
    now, attempts unchanged, until the transaction is decided, then repaired."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    keys, commit = await undecided_group(st, "waits")
    await queue.enqueue("waits", keys, {}, "torn")
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0, sweep_interval=0,
        backoff=RetryBackoff(base=0.01, max_delay=0.02),
    )  # fmt: skip
    running = asyncio.create_task(worker.run())
    try:

        async def waited_past_its_attempts() -> bool:
            return worker.stats.lost_races >= 3 or worker.stats.dead_lettered > 0

        await eventually(waited_past_its_attempts, within=50)
        assert worker.stats.dead_lettered == 0 and worker.stats.failed == 0

        async def put_off_with_no_attempt() -> bool:  # seen while it waits its delay
            waiting = await queue.delayed()
            assert all(w["attempts"] == "0" for w in waiting), waiting
            return any(float(w.get("waited", 0)) >= 1.5 for w in waiting)

        await eventually(put_off_with_no_attempt, within=50)
        assert worker.stats.dead_lettered == 0 and worker.stats.failed == 0
        await commit()  # T is decided

        async def done() -> bool:
            return worker.stats.done == 1

        await eventually(done)
    finally:
        worker.stop()
        await running
    assert (await queue.stats())["dead"] == 0 and worker.stats.postponed >= 3
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"t")


async def test_waiting_on_undecided_transactions_is_bounded(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job is not put off for ever: past `UNDECIDED_WAIT` seconds of waiting in all,
    meeting a transaction still committing counts as a failed attempt, and the job
    ends as a dead letter with its waits recorded."""
    monkeypatch.setattr(_worker_record, "UNDECIDED_WAIT", 1.0)
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    keys, _ = await undecided_group(st, "bounded")
    await queue.enqueue("bounded", keys, {}, "torn")
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0, sweep_interval=0,
        backoff=RetryBackoff(base=0.01, max_delay=0.02), burst=True,
    )  # fmt: skip
    stats = await asyncio.wait_for(worker.run(), 50)
    assert stats.lost_races == 4 and stats.dead_lettered == 1  # met T four times
    assert stats.postponed == 2 and stats.failed == 1
    (letter,) = await queue.dead_letters()
    assert float(letter["waited"]) >= 1.0 and "still committing" in letter["last_error"]


def _drop_script_reply(proxied: Proxied, stream: bytes, name: str) -> ProxyRule:
    """Lose the reply of the next call of stampede's script `name` on `stream`'s shard
    (the proxy forwards the call, then drops the connection)."""
    sha = script(name).sha.encode()
    return proxied.proxy_for(stream.decode()).drop_reply(
        lambda cmd: cmd[0].upper() == b"EVALSHA" and cmd[1] == sha
    )


async def _burst(st: Stampede, queue: RepairQueue) -> WorkerStats:
    """A burst `Worker` (NewestWins) run over `queue` until it is drained; its stats."""
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0, sweep_interval=0,
        burst=True,
    )  # fmt: skip
    return await asyncio.wait_for(worker.run(), 60)


async def test_a_job_whose_ack_reply_was_lost_is_counted_done(px: Proxied) -> None:  # noqa: F811
    """The ack of a repaired job ran and its reply was lost: the ack was not resent,
    and the worker recorded a failure for a job that was done (a retry counted and
    logged that was never queued; later, a job "taken over"). An ack run twice does
    what it does once, so it is resent: the job is counted done, once."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")  # the ack script is loaded
    (warm,) = await queue.claim("w", 1)
    await queue.ack(warm)
    await plant(st, queue, 1)
    rule = _drop_script_reply(px, queue.streams[0], "queue_ack")
    stats = await _burst(st, queue)
    assert rule.hits == 1
    assert stats.done == 1 and stats.repaired == 1, stats.counts()
    assert stats.failed == 0 and not stats.errors, stats.as_dict()
    assert await queue.stats(detailed=True) == {
        "length": 0, "pending": 0, "lag": 0, "dead": 0, "delayed": 0,
    }  # fmt: skip


async def test_requeueing_every_dead_letter_leaves_no_key_behind(st: Stampede) -> None:
    """Every key the queue makes beside its stream goes once nothing needs it: after
    a retry, a dead letter and a requeue of every dead letter, then a drain, no marker,
    delayed, retries, dying or sources key is left (the sources set, one dead letter
    per job, stayed for ever once its dead letters were requeued)."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=2)
    await queue.clear()
    for n in range(3):
        await queue.enqueue(f"gc{n}", [f"gc{n}:a"], {}, "torn")
    for job in await queue.claim("w", 10):
        assert await queue.fail(job, "boom", delay=0.001) is False  # a delayed retry
    await eventually(lambda: _claimed_all(queue, 3))
    assert [r["outcome"] for r in await queue.requeue_dead()] == ["queued"] * 3
    for job in await queue.claim("w", 10):
        await queue.ack(job)
    (stream,) = queue.streams
    left = [
        key
        for key in [*queue.side_keys(stream)[1:], queue.dead, queue.dead_sources]
        if await st.topology.execute(key, "EXISTS", key)
    ]
    assert left == [queue.dead] or left == [], left  # an empty stream may stay
    assert (await queue.stats(detailed=True))["length"] == 0


async def _claimed_all(queue: RepairQueue, n: int) -> bool:
    """Claim the retries as they come due and dead-letter them; True once `n` are dead."""
    for job in await queue.claim("w", 10):
        assert await queue.fail(job, "boom again") is True
    return (await queue.stats())["dead"] == n


async def test_a_dead_letter_whose_reply_was_lost_is_counted_once(
    px: Proxied,  # noqa: F811
) -> None:
    """The dead-letter call ran and its reply was lost: the worker, not knowing, went
    on to record a failure, found the job no longer its own and counted nothing,
    though it had dead-lettered it. The call is resent now and owns up: one dead
    letter, counted once."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")  # the scripts are loaded
    (warm,) = await queue.claim("w", 1)
    await queue.dead_letter(warm, "warming up")
    await queue.requeue_dead()
    (warm,) = await queue.claim("w", 1)
    await queue.ack(warm)
    (stream,) = queue.streams
    await st.topology.execute(stream, "XADD", stream, "*", "group", "m", "keys", "{}")
    rule = _drop_script_reply(px, stream, "queue_dead")
    stats = await _burst(st, queue)
    assert rule.hits == 1
    assert stats.dead_lettered == 1 and not stats.errors, stats.as_dict()
    assert len(await queue.dead_letters()) == 1


async def test_a_claim_whose_reply_was_lost_still_hands_over_its_jobs(
    px: Proxied,  # noqa: F811
) -> None:
    """XREADGROUP delivered jobs and its reply was lost: the claim raised, the jobs
    stayed pending in the worker's name unknown to it, and were taken over only after
    `min_idle`, each delivery counted as a worker's death. The claim now recovers
    them at once, counted as delivered once, and never a job the caller holds."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("held", ["held:a"], {}, "torn")
    (held,) = await queue.claim("w", 1)
    for n in range(3):
        await queue.enqueue(f"lost{n}", [f"lost{n}:a"], {}, "torn")
    rule = px.proxy_for(queue.streams[0].decode()).drop_reply(
        lambda cmd: cmd[0].upper() == b"XREADGROUP"
    )
    jobs = await queue.claim("w", 10, in_hand=[held.id])
    assert rule.hits == 1
    assert sorted(j.group for j in jobs) == [b"lost0", b"lost1", b"lost2"]
    assert all(j.deliveries == 1 for j in jobs)
    for job in [held, *jobs]:
        await queue.ack(job)
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}


async def test_an_enqueue_whose_reply_was_lost_is_resent_and_queues_one_job(
    px: Proxied,  # noqa: F811
) -> None:
    """The enqueue ran and its reply was lost: it raised `OutcomeUnknownError`, so a
    read repaired with `Enqueue` failed although its job was queued. The resend finds
    the job the first call added (the group's marker) and adds nothing: it is resent,
    and one job is queued."""
    st = px.st
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("warm", ["warm:a"], {}, "torn")  # the enqueue script is loaded
    (warm,) = await queue.claim("w", 1)
    await queue.ack(warm)
    rule = _drop_script_reply(px, queue.streams[0], "queue_enqueue")
    assert await queue.enqueue("lost", ["lost:a", "lost:b"], {}, "torn") is None  # covered
    assert rule.hits == 1
    (job,) = await queue.claim("w", 10)
    assert job.group == b"lost" and await queue.claim("w", 10) == []


async def test_a_requeue_takes_the_parked_copy_of_a_dead_letter_with_it(st: Stampede) -> None:
    """A worker that died after publishing a dead letter, before deleting its parked
    copy, leaves that copy for the next claim to publish (a no-op while the dead letter
    is there). A requeue of that dead letter used to leave the copy parked, and the
    requeue's trim took its source: the next claim published it again, so the job was
    both queued anew and a dead letter (a second requeue, a second repair)."""
    queue = RepairQueue(st.topology, partitions=1, max_attempts=1, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("parked", ["parked:a"], {}, "torn")
    (job,) = await queue.claim("a", 1)
    dying = DiesAfter(st.topology, {"queue_bury"})
    with pytest.raises(InjectedCrash):
        await RepairQueue(dying, partitions=1, max_attempts=1).dead_letter(job, "boom", 1)
    (letter,) = await queue.dead_letters()
    assert letter["source_id"] == job.id
    (requeued,) = await queue.requeue_dead()
    assert requeued["outcome"] == "queued"
    await asyncio.sleep(queue.min_idle_ms / 1000 + 0.05)  # a parked copy is now claimable
    await queue.promote()
    assert await queue.dead_letters() == []
    stats = await queue.stats(detailed=True)
    assert stats == {"length": 1, "pending": 0, "lag": 1, "dead": 0, "delayed": 0}, stats
