"""Repair outcomes at the edges: what a repair reports is what it did."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from stampede import Envelope, RetryPolicy, Stampede, Status
from stampede._kept import drop_kept
from stampede.errors import RepairError
from stampede.repair import Enqueue, NewestWins, Refetch, RepairQueue, RetryBackoff, Worker
from stampede.results import RepairAction
from stampede.versions import HybridClock
from stampede.wire import commit_key, encode_commit, new_token

from ..support import eventually, open_stampede, spread_keys, write_newer

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)


async def whole_data_old_record(st: Stampede, group: str, keys: list[str], record: bytes) -> None:
    """Whole data of one clock-stamped write, its record slot holding `record`."""
    version, token = HybridClock().now(), new_token()
    raw = [k.encode() for k in keys]
    done = await st.topology.write_guarded(
        raw, [Envelope(version, token, b"d").encode()] * len(raw), version=version, token=token
    )
    assert done.ok
    ckey = commit_key(group.encode())
    await st.topology.execute(ckey, "SET", ckey, record)


@pytest.mark.parametrize("kind", ["mixed", "foreign"])
async def test_a_roll_forward_whose_record_is_refused_says_so(st: Stampede, kind: str) -> None:
    """The record slot holds what the guard cannot order the write's record against: a
    sequence-versioned record (MIXED) or one no stampede wrote (FOREIGN). The roll
    forward writes nothing and says why, never `rolled_forward`."""
    keys = spread_keys(st, f"rf-{kind}")
    group = f"rf-{kind}"
    version = 5 if kind == "mixed" else 2**63
    record = Envelope(5, new_token(), encode_commit([k.encode() for k in keys])).encode()
    if kind == "foreign":
        record = b"%d:%s" % (version, record.split(b":", 1)[1])
    await whole_data_old_record(st, group, keys, record)
    ckey = commit_key(group.encode())
    with pytest.raises(RepairError, match="commit record") as raised:
        await st.read(group, keys, mode="commit", retry=QUICK, repair=NewestWins())
    assert ckey.decode() in str(raised.value) and "nothing was written" in str(raised.value)
    assert await st.topology.execute(ckey, "GET", ckey) == record  # nothing written


async def test_a_worker_counts_a_refused_roll_forward_as_failed(st: Stampede) -> None:
    """The worker counted the refused roll forward as `rolled_forward` and acked the job;
    it is a failed attempt now (dead-lettered here, after one), counted under no repair."""
    keys = spread_keys(st, "rf-worker")
    record = Envelope(5, new_token(), encode_commit([k.encode() for k in keys])).encode()
    await whole_data_old_record(st, "rf-worker", keys, record)
    queue = RepairQueue(st.topology, partitions=1, max_attempts=1)
    await queue.clear()
    await queue.enqueue("rf-worker", keys, {}, "uncommitted", mode="commit")
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0, sweep_interval=0,
        burst=True,
    )  # fmt: skip
    stats = await asyncio.wait_for(worker.run(), 60)
    assert stats.rolled_forward == 0 and stats.done == 0, stats.counts()
    assert stats.dead_lettered == 1 and stats.errors == {"repair": 1}, stats.as_dict()
    (dead,) = await queue.dead_letters()
    assert "commit record" in dead["last_error"]


async def test_a_rewrite_whose_record_is_refused_says_so(st: Stampede) -> None:
    """A torn group whose record slot holds a sequence-versioned record: the repair's
    keys land, its record cannot. That was reported `lost_race` (no newer write won);
    it is a `RepairError` saying the keys were rewritten and the record refused."""
    keys = spread_keys(st, "rw-mixed")
    record = Envelope(5, new_token(), encode_commit([k.encode() for k in keys])).encode()
    await whole_data_old_record(st, "rw-mixed", keys, record)
    first = keys[0].encode()
    newer = Envelope(HybridClock().now(), new_token(), b"e")
    await st.topology.execute(first, "SET", first, newer.encode())  # torn now
    with pytest.raises(RepairError, match=r"commit record .* refused") as raised:
        await st.read("rw-mixed", keys, mode="commit", retry=QUICK, repair=NewestWins())
    assert "keys were rewritten" in str(raised.value)
    ckey = commit_key(b"rw-mixed")
    assert await st.topology.execute(ckey, "GET", ckey) == record


async def _expiry(st: Stampede, key: bytes) -> int:
    return int(await st.topology.execute(key, "PEXPIRETIME", key))


@pytest.mark.parametrize("left", ["no data", "an older write"])
async def test_a_refetch_past_a_record_without_data_gives_the_data_its_own_life(
    topology_env: tuple[str, Any], left: str
) -> None:
    """Only the commit record holds the newest write: its data is gone (expired a tick
    before the record, or deleted outside stampede), leaving nothing, or an older write
    at the keys that write did not name. The repair took that record's remaining life
    for the values it restores (seconds here, a tick in the wild: restored data that
    expired as it landed, or a group gone again at the next read). Restored values now
    live as the data would without that record (the options' ttl over nothing, the
    older write's own expiry over it), and the record the repair writes expires with
    them."""
    kind, env = topology_env
    async with open_stampede(env, kind, ttl=3600, mode="commit") as st:
        group = f"rec-only-{left.split()[-1]}"
        keys = spread_keys(st, group, 2)
        raw = [k.encode() for k in keys]
        if left == "an older write":
            await st.write(group, dict.fromkeys(keys, b"old"), ttl=7200)
        await st.write(group, dict.fromkeys(keys[:1], b"new"), ttl=60)
        await st.topology.execute(raw[0], "DEL", raw[0])  # its data is gone, its record not
        await drop_kept(st.topology, raw[:1])  # (as it goes when the data expires)
        ckey = commit_key(group.encode())
        record_at = await _expiry(st, ckey)
        kept = await _expiry(st, raw[1]) if left == "an older write" else None

        async def load(group: bytes, names: Sequence[bytes]) -> dict[bytes, bytes]:
            return dict.fromkeys(names, b"from-db")

        repair = Refetch(load, fills_missing=True)
        result = await st.read(group, keys, retry=QUICK, repair=repair)
        assert result.repaired and result.values == dict.fromkeys(keys, b"from-db")
        found = {key: await _expiry(st, key) for key in [*raw, ckey]}
        assert len(set(found.values())) == 1, found  # the record expires with its data
        at = found[ckey]
        if kept is None:
            assert at >= record_at - 60_000 + 3_600_000, found  # the ttl, not the record's
        else:
            assert at == kept, found  # the older write's life, never extended
        again = await st.read(group, keys)
        assert again.consistent and again.values == result.values


@pytest.mark.parametrize("record", ["with its record", "its record lost"])
@pytest.mark.parametrize("source", ["exists", "gone"])
async def test_a_commit_mode_read_through_of_a_deleted_group_asks_the_source(
    st: Stampede, record: str, source: str
) -> None:
    """Commit mode, `Refetch(fills_missing=True)`, a deleted group (tombstones, with or
    without the delete's record). The repair rolled the delete forward instead of
    asking the loader: it rewrote the record (or wrote the lost one), said
    `rolled_forward` and `repaired`, and a group the source says exists read
    `not_found`. A delete reads `not_found` with or without its record: nothing to
    roll forward. The loader is asked, as in stamp mode: data the source has is
    restored; a group it says is gone reads `not_found` with nothing written."""
    group = f"rtc-{source}-{record.split()[-1]}"
    keys = spread_keys(st, group, 2)
    await st.write(group, dict.fromkeys(keys, b"x"), mode="commit")
    await st.delete(group, keys, mode="commit")
    ckey = commit_key(group.encode())
    if record == "its record lost":
        await st.topology.execute(ckey, "DEL", ckey)
    before = [await st.topology.execute(k, "GET", k) for k in [*map(str.encode, keys), ckey]]
    asked: list[bytes] = []

    async def load(group: bytes, names: Sequence[bytes]) -> dict[bytes, bytes] | None:
        asked.append(group)
        return dict.fromkeys(names, b"from-db") if source == "exists" else None

    repair = Refetch(load, fills_missing=True)
    result = await st.read(group, keys, mode="commit", retry=QUICK, repair=repair)
    assert asked == [group.encode()]
    assert result.repair is not None
    if source == "exists":
        assert result.repaired and result.values == dict.fromkeys(keys, b"from-db")
        again = await st.read(group, keys, mode="commit")
        assert again.consistent and again.values == result.values
    else:
        assert result.status is Status.NOT_FOUND and not result.repaired, result.repair
        after = [await st.topology.execute(k, "GET", k) for k in [*map(str.encode, keys), ckey]]
        assert after == before  # nothing written


async def test_a_worker_leaves_a_write_in_flight_to_its_writer(st: Stampede) -> None:
    """A read found the group torn (a writer died part way) and queued it. Before the
    worker looks, a new write W begins: it has reached one shard, not yet the other.
    The worker repaired at first sight: its stamp, just after W's, kept W's late half
    out (W's receipt: `superseded`, as if a newer write had won), and `NewestWins()`
    left W's payloads beside older ones. A job whose group holds a write newer than
    anything its read saw is put off (no attempt counted) with what it sees now, as a
    read waits out its retries: W lands whole, and the job finds the group whole."""
    group = "inflight"
    keys = spread_keys(st, group, 2)
    raw = [k.encode() for k in keys]
    await st.write(group, dict.fromkeys(keys, b"v1"))
    await write_newer(st, raw[:1], b"dead")  # a writer died part way
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    queued = await st.read(group, keys, retry=QUICK, repair=Enqueue(queue))
    assert queued.queued
    version, token = st.versions.now() + 10**9, new_token()  # type: ignore[attr-defined]
    w = Envelope(version, token, b"w").encode()
    landed = await st.topology.write_guarded(raw[:1], [w], version=version, token=token)
    assert landed.ok  # W's first half
    worker = Worker(
        st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=0, sweep_interval=0,
        burst=True, backoff=RetryBackoff(base=5, jitter=0),
    )  # fmt: skip
    running = asyncio.create_task(worker.run())

    async def looked() -> bool:
        return worker.stats.postponed > 0 or running.done()

    await eventually(looked)
    assert worker.stats.postponed == 1, worker.stats.as_dict()
    rest = await st.topology.write_guarded(raw[1:], [w], version=version, token=token)
    assert set(rest.results.values()) == {1}, rest.results  # W's late half: written
    stats = await asyncio.wait_for(running, 60)
    assert stats.done == 1 and stats.repaired == 0 and not stats.errors, stats.as_dict()
    after = await st.read(group, keys)
    assert after.consistent and (after.version, after.token) == (version, token)


async def test_a_record_that_holds_the_write_but_names_fewer_keys_is_no_roll_forward(
    st: Stampede,
) -> None:
    """The group's data is one whole write and its record holds that write but names
    only some of the keys read (partial). Rolling forward rewrote the same record
    (`SAME`), said `rolled_forward` and left the group partial for the next read. It
    is repaired: a record naming every key, under the repair's own stamp."""
    keys = spread_keys(st, "rec-fewer", 2)
    raw = [k.encode() for k in keys]
    version, token = HybridClock().now(), new_token()
    data = Envelope(version, token, b"d").encode()
    assert (await st.topology.write_guarded(raw, [data] * 2, version=version, token=token)).ok
    ckey = commit_key(b"rec-fewer")
    record = Envelope(version, token, encode_commit(raw[:1])).encode()
    assert (await st.topology.write_guarded([ckey], [record], version=version, token=token)).ok
    result = await st.read("rec-fewer", keys, mode="commit", retry=QUICK, repair=NewestWins())
    assert result.repair is not None and result.repair.action is RepairAction.REWRITTEN
    again = await st.read("rec-fewer", keys, mode="commit")
    assert again.consistent and again.values == dict.fromkeys(keys, b"d")


class WriterFirst:
    """`NewestWins()`, after a newer whole write of the group landed (the race lost)."""

    name = "writer-first"

    def __init__(self, st: Stampede, keys: list[str]) -> None:
        self.st, self.keys = st, keys

    async def repair(self, ctx: Any, obs: Any, verdict: Any) -> Any:
        await self.st.write(obs.group, dict.fromkeys(self.keys, b"newer"))
        return await NewestWins().repair(ctx, obs, verdict)


async def test_a_worker_job_whose_race_left_the_group_whole_is_counted_under_an_outcome(
    st: Stampede,
) -> None:
    """A newer write beat the worker's repair and left the group whole: the job is done
    (acked) and its histogram said `already_consistent`, but no outcome counter had it
    (`stampede_worker_jobs_total` summed to less than `done`). It counts as
    `already_consistent`, as a lost race (`lost_races`) too."""
    keys = spread_keys(st, "race-whole", 2)
    await st.write("race-whole", dict.fromkeys(keys, b"v1"))
    await write_newer(st, [k.encode() for k in keys[:1]], b"torn")
    queue = RepairQueue(st.topology, partitions=1)
    await queue.clear()
    await queue.enqueue("race-whole", keys, {}, "torn")
    worker = Worker(
        st.topology, queue, WriterFirst(st, keys), poll_interval=0.01, block_ms=0,
        sweep_interval=0, burst=True,
    )  # fmt: skip
    stats = await asyncio.wait_for(worker.run(), 60)
    assert stats.done == 1 and stats.lost_races == 1, stats.as_dict()
    outcomes = ("repaired", "rolled_forward", "deleted", "already_consistent")
    assert sum(getattr(stats, o) for o in outcomes) == stats.done, stats.as_dict()
    assert stats.already_consistent == 1
