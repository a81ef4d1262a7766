"""Repair strategies: NewestWins, Refetch, Enqueue, commit roll-forward, and racing writes."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from stampede import Envelope, Mode, RetryPolicy, Stampede, Status, TornReadError
from stampede import _pipeline as pipeline
from stampede.errors import RepairError
from stampede.repair import Enqueue, Loaded, NewestWins, Refetch, RepairQueue
from stampede.results import RepairAction
from stampede.typing import RepairContext
from stampede.verdict import judge
from stampede.wire import new_token

from ..support import open_stampede, spread_keys, write_newer

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)


async def tear(st: Stampede, group: str, keys: list[str], payload: bytes = b"new") -> str:
    """Leave `group` torn: a newer write (just after the stored one) reached one shard only."""
    shard = st.topology.shard_of(keys[0].encode())
    some = [k.encode() for k in keys if st.topology.shard_of(k.encode()) == shard]
    version, token = await write_newer(st, some, payload)
    st.versions.observe(version)  # later writes of this client order after the tear
    return token


async def test_newest_wins_restamps_current_payloads(st: Stampede) -> None:
    """Without rebuild, each key keeps its payload and the group gets one new stamp."""
    keys = spread_keys(st, "nw")
    await st.write("nw", {k: b"old-" + k.encode() for k in keys})
    torn_token = await tear(st, "nw", keys)
    result = await st.read("nw", keys, retry=QUICK, repair=NewestWins())
    assert result.consistent and result.repaired and result.status is Status.CONSISTENT
    assert result.repair is not None and result.repair.action is RepairAction.REWRITTEN
    fresh = await st.read("nw", keys)
    assert fresh.token == result.token and fresh.values == result.values
    # The repair writes under its own stamp, ordered just after the newest write it saw.
    assert result.token is not None and result.token > torn_token
    shard = st.topology.shard_of(keys[0].encode())
    for key in keys:
        expected = b"new" if st.topology.shard_of(key.encode()) == shard else b"old-" + key.encode()
        assert fresh.values[key] == expected


async def test_newest_wins_rebuilds_stale_keys(st: Stampede) -> None:
    """With rebuild, stale keys are regenerated from the keys that carry the newest write."""
    keys = spread_keys(st, "rb", 2)
    await st.write("rb", dict.fromkeys(keys, b"v1"))
    await tear(st, "rb", keys, b"v2")

    def rebuild(truth: Mapping[bytes, bytes], stale: Sequence[bytes]) -> dict[bytes, bytes]:
        source = next(iter(truth.values()))
        return {k: b"derived-from-" + source for k in stale}

    result = await st.read("rb", keys, retry=QUICK, repair=NewestWins(rebuild=rebuild))
    assert result.consistent and result.repaired
    assert result.values == {keys[0]: b"v2", keys[1]: b"derived-from-v2"}


async def test_newest_wins_cannot_invent_a_missing_key(st: Stampede) -> None:
    """A missing key without rebuild stays an error that says what to use instead."""
    keys = spread_keys(st, "miss", 2)
    await st.write("miss", dict.fromkeys(keys, b"v1"))
    await st.topology.execute(keys[1].encode(), "DEL", keys[1])
    with pytest.raises(TornReadError, match="rebuild"):
        await st.read("miss", keys, retry=QUICK, repair=NewestWins())


async def test_newest_wins_completes_a_transaction_delete_only_over_its_keys(
    st: Stampede,
) -> None:
    """A transaction that deleted one key of a group is no delete of the group: a group
    read with NewestWins never deletes the keys it did not name (their acknowledged
    values stay), and says what to use instead; a transaction that deleted every key
    of the group is completed as a group delete."""
    a, b = spread_keys(st, "txdel", 2)
    await st.write("txdel", {a: b"va", b: b"vb"})
    async with st.transaction() as tx:
        tx.delete(a)
    with pytest.raises(TornReadError, match="a transaction's delete"):
        await st.read("txdel", [a, b], retry=QUICK, repair=NewestWins())
    assert Envelope.decode(await st.topology.execute(b.encode(), "GET", b)).payload == b"vb"
    c, d = spread_keys(st, "txall", 2)
    await st.write("txall", {c: b"vc", d: b"vd"})
    async with st.transaction() as tx:  # both keys deleted: one shard's tombstone lost
        tx.delete(c)
        tx.delete(d)
    await st.topology.execute(d.encode(), "DEL", d)
    result = await st.read("txall", [c, d], retry=QUICK, repair=NewestWins())
    assert result.status is Status.NOT_FOUND or result.values == {c: None, d: None}


async def test_commit_mode_rolls_forward(st: Stampede) -> None:
    """Whole data without its record is rolled forward by writing the record, not rewritten."""
    keys = spread_keys(st, "roll")
    token = new_token()
    await st.topology.write_guarded(
        [k.encode() for k in keys],
        [Envelope(7, token, b"d").encode()] * len(keys),
        version=7,
        token=token,
    )
    result = await st.read("roll", keys, mode="commit", retry=QUICK, repair=NewestWins())
    assert result.repair is not None and result.repair.action is RepairAction.ROLLED_FORWARD
    assert (result.version, result.token) == (7, token)
    again = await st.read("roll", keys, mode="commit")
    assert again.consistent and again.token == token


@pytest.mark.parametrize("strategy", ["newest", "refetch"])
async def test_repair_never_overwrites_a_racing_newer_write(st: Stampede, strategy: str) -> None:
    """A write that starts after the repair's read always survives, whatever the
    interleaving: one round in three the racer lands before the repair writes, one in
    three only after the repair is done, and the rest race freely (random delays)."""
    keys = spread_keys(st, "race")
    rng = random.Random(7)
    racers: list[asyncio.Task[str]] = []
    outcomes: dict[str, int] = {}
    order = ["free"]
    repaired = asyncio.Event()

    async def start_racer(payload: bytes) -> None:
        """Begin a full write of the group now: after the read, before the repair's writes."""

        async def racer() -> str:
            if order[0] == "repair-first":
                await repaired.wait()
            else:
                await asyncio.sleep(rng.choice([0, 0, rng.random() * 0.003]))
            return (await st.write("race", dict.fromkeys(keys, payload))).token

        task = asyncio.create_task(racer())
        racers.append(task)
        if order[0] == "racer-first":
            await task  # the racer has landed before the repair goes on

    async def loader(group: bytes, ks: Sequence[bytes]) -> dict[bytes, bytes]:
        await start_racer(b"racer")
        await asyncio.sleep(rng.random() * 0.003)
        return dict.fromkeys(ks, b"from-source")

    async def rebuild(truth: Mapping[bytes, bytes], stale: Sequence[bytes]) -> dict[bytes, bytes]:
        await start_racer(b"racer")
        await asyncio.sleep(rng.random() * 0.003)
        return dict.fromkeys(stale, b"rebuilt")

    repair = Refetch(loader) if strategy == "refetch" else NewestWins(rebuild=rebuild)
    for i in range(40):
        racers.clear()
        repaired.clear()
        order[0] = ("racer-first", "repair-first", "free")[i % 3]
        await st.write("race", dict.fromkeys(keys, b"base"))
        await tear(st, "race", keys, b"torn")
        result = await st.read("race", keys, retry=QUICK, repair=repair)
        repaired.set()
        assert result.repair is not None
        outcomes[result.repair.action.value] = outcomes.get(result.repair.action.value, 0) + 1
        (racer_token,) = await asyncio.gather(*racers)
        raw = [await st.topology.execute(k.encode(), "GET", k) for k in keys]
        assert {Envelope.decode(r).token for r in raw} == {racer_token}, outcomes
        assert {Envelope.decode(r).payload for r in raw} == {b"racer"}
    # Both orders happened: repairs that finished first, and repairs that lost.
    assert outcomes.get("rewritten", 0) > 0 and outcomes.get("lost_race", 0) > 0, outcomes


async def test_enqueue_returns_best_effort_and_queues_once(st: Stampede) -> None:
    """Enqueue returns the merge marked not consistent, queues one job per group, acks clean."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    keys = spread_keys(st, "q")
    await st.write("q", dict.fromkeys(keys, b"old"))
    await tear(st, "q", keys)
    first = await st.read("q", keys, retry=QUICK, repair=Enqueue(queue))
    assert first.queued and not first.consistent and first.status is Status.TORN
    assert set(first.values.values()) == {b"old", b"new"}
    second = await st.read("q", keys, retry=QUICK, repair=Enqueue(queue))
    assert second.repair is not None and second.repair.detail == {"job": "already pending"}
    assert (await queue.stats())["length"] == 1
    jobs = await queue.claim("tester", 10)
    assert len(jobs) == 1
    job = jobs[0]
    assert job.group == b"q" and job.keys == [k.encode() for k in keys] and job.reason == "torn"
    assert set(job.seen) == set(keys)
    await queue.ack(job)
    assert await queue.stats() == {"length": 0, "pending": 0, "lag": 0, "dead": 0}
    assert await queue.enqueue("q", keys, {}, "torn") is not None


async def test_failed_jobs_retry_then_dead_letter(st: Stampede) -> None:
    """A job failing max_attempts times lands in the dead letters with its last error."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    await queue.enqueue("dl", ["dl:a"], {"dl:a": None}, "partial")
    job = (await queue.claim("w", 1))[0]
    assert not await queue.fail(job, "boom 1")
    job = (await queue.claim("w", 1))[0]
    assert job.attempts == 1 and job.last_error == "boom 1"
    assert await queue.fail(job, "boom 2")
    dead = await queue.dead_letters()
    assert len(dead) == 1 and dead[0]["last_error"] == "boom 2" and dead[0]["group"] == "dl"
    assert (await queue.stats())["length"] == 0


async def test_jobs_of_a_dead_consumer_are_reclaimed(st: Stampede) -> None:
    """A job claimed but never acked is taken over once idle, with its delivery count."""
    queue = RepairQueue(st.topology, min_idle=0.1)
    await queue.clear()
    await queue.enqueue("rc", ["rc:a"], {}, "torn")
    assert len(await queue.claim("dead-worker", 5)) == 1
    assert await queue.claim("live-worker", 5) == []
    await asyncio.sleep(0.15)
    jobs = await queue.claim("live-worker", 5)
    assert len(jobs) == 1 and jobs[0].deliveries == 2


async def test_poison_entry_becomes_a_dead_letter(st: Stampede) -> None:
    """A stream entry that is not a job is surfaced as malformed and dead-lettered."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    stream = queue.streams[0]
    await queue.enqueue("ok", ["ok:a"], {}, "torn")
    await st.topology.execute(stream, "XADD", stream, "*", "group", "p", "keys", "{not json")
    jobs = await queue.claim("w", 5)
    poison = next(j for j in jobs if j.reason == "malformed")
    assert await queue.fail(poison, poison.last_error or "malformed")
    assert "malformed" in (await queue.dead_letters())[0]["last_error"]


async def test_refetch_loader_errors_are_named(st: Stampede) -> None:
    """A loader that raises, or forgets a key, gives RepairError naming the group."""
    keys = spread_keys(st, "lf", 2)
    await st.write("lf", dict.fromkeys(keys, b"x"))
    await tear(st, "lf", keys)

    async def broken(group: bytes, ks: Sequence[bytes]) -> dict[bytes, bytes]:
        raise OSError("database is down")

    with pytest.raises(RepairError, match="database is down"):
        await st.read("lf", keys, retry=QUICK, repair=Refetch(broken))

    async def partial(group: bytes, ks: Sequence[bytes]) -> dict[bytes, bytes]:
        return {ks[0]: b"only one"}

    with pytest.raises(RepairError, match="every"):
        await st.read("lf", keys, retry=QUICK, repair=Refetch(partial))


async def test_refetch_of_a_vanished_entity_deletes_guarded(st: Stampede) -> None:
    """A loader saying the entity is gone deletes the torn copies; the group reads not found."""
    keys = spread_keys(st, "gone", 2)
    await st.write("gone", dict.fromkeys(keys, b"x"), mode="commit")
    await tear(st, "gone", keys)

    async def none(group: bytes, ks: Sequence[bytes]) -> None:
        return None

    result = await st.read("gone", keys, retry=QUICK, repair=Refetch(none), mode=Mode.COMMIT)
    assert result.status is Status.NOT_FOUND and result.repaired
    assert (await st.read("gone", keys, mode="commit")).status is Status.NOT_FOUND


@pytest.mark.parametrize("deleted", ["one key", "every key"])
async def test_refetch_over_a_delete_gives_restored_data_the_ttl_not_the_grace(
    topology_env: tuple[str, Any], deleted: str
) -> None:
    """The newest write a `Refetch` saw is a delete (it reached one key: torn; or every
    key, read through with `fills_missing`), and the source says the entity exists:
    the restored payloads are new data and live as the options' ttl says, as those of
    a Refetch of a missing group do. They used to take the tombstones' expiry (their
    remaining grace), so the freshly restored group vanished within seconds."""
    kind, env = topology_env
    async with open_stampede(env, kind, ttl=3600) as st:
        keys = spread_keys(st, "rdel", 2)
        await st.write("rdel", dict.fromkeys(keys, b"x"))
        await st.delete("rdel", keys[:1] if deleted == "one key" else keys, grace=30)

        async def load(group: bytes, names: Sequence[bytes]) -> dict[bytes, bytes]:
            return dict.fromkeys(names, b"from-db")

        since = int(await st.topology.execute(keys[0].encode(), "PEXPIRETIME", keys[0]))
        repair = Refetch(load, fills_missing=True)
        result = await st.read("rdel", keys, retry=QUICK, repair=repair)
        assert result.repaired and result.values == dict.fromkeys(keys, b"from-db")
        for key in keys:
            at = int(await st.topology.execute(key.encode(), "PEXPIRETIME", key))
            assert at >= since - 30_000 + 3_600_000, key  # the ttl, from after the delete


async def test_read_through_of_a_deleted_group_writes_nothing(st: Stampede) -> None:
    """With `fills_missing`, a read of a deleted group whose source says it is gone is
    not found and writes nothing: its tombstones are not rewritten (a fresh grace at
    every read would keep them for ever), and no group that never existed gets any."""
    keys = spread_keys(st, "rt", 2)
    await st.write("rt", dict.fromkeys(keys, b"x"))
    deleted = await st.delete("rt", keys)
    before = [await st.topology.execute(k.encode(), "GET", k) for k in keys]
    expiry = [await st.topology.execute(k.encode(), "PEXPIRETIME", k) for k in keys]
    asked: list[bytes] = []

    async def none(group: bytes, ks: Sequence[bytes]) -> None:
        asked.append(group)

    repair = Refetch(none, fills_missing=True)
    result = await st.read("rt", keys, retry=QUICK, repair=repair)
    assert asked == [b"rt"] and result.status is Status.NOT_FOUND and not result.repaired
    assert (result.version, result.token) == (deleted.version, deleted.token)
    assert [await st.topology.execute(k.encode(), "GET", k) for k in keys] == before
    assert [await st.topology.execute(k.encode(), "PEXPIRETIME", k) for k in keys] == expiry

    never = spread_keys(st, "never", 2)
    result = await st.read("never", never, retry=QUICK, repair=repair)
    assert result.status is Status.NOT_FOUND and not result.repaired
    assert [await st.topology.execute(k.encode(), "EXISTS", k) for k in never] == [0, 0]

    # A source version newer than anything stored orders a delete: its tombstones
    # keep a stalled writer's older row out, and are written once, not at every read.
    async def gone_at_7(group: bytes, ks: Sequence[bytes]) -> Loaded:
        return Loaded(None, 7)

    versioned = Refetch(gone_at_7, fills_missing=True)
    vkeys = spread_keys(st, "vgone", 2)
    result = await st.read("vgone", vkeys, retry=QUICK, repair=versioned)
    assert result.status is Status.NOT_FOUND and result.repaired and result.version == 7
    tombstones = [await st.topology.execute(k.encode(), "GET", k) for k in vkeys]
    again = await st.read("vgone", vkeys, retry=QUICK, repair=versioned)
    assert again.status is Status.NOT_FOUND and not again.repaired
    assert [await st.topology.execute(k.encode(), "GET", k) for k in vkeys] == tombstones
    late = await st.write("vgone", dict.fromkeys(vkeys, b"row 6"), version=6)
    assert late.superseded == tuple(k.encode() for k in vkeys)


async def test_a_second_repair_of_the_same_state_writes_nothing(st: Stampede) -> None:
    """Two repairs of one observation (a job taken over while its first worker still
    runs) never share a stamp; the second finds the keys the first wrote, writes
    nothing and says `lost_race`, with the group whole under the first one's stamp."""
    keys = spread_keys(st, "twice", 2)
    await st.write("twice", dict.fromkeys(keys, b"old"))
    await tear(st, "twice", keys)
    raw = [k.encode() for k in keys]
    obs = await pipeline.observe(st.topology, b"twice", raw, Mode.STAMP)
    ctx = RepairContext(st.topology, Mode.STAMP, st.versions)

    async def load(group: bytes, ks: Sequence[bytes]) -> dict[bytes, bytes]:
        return dict.fromkeys(ks, b"db")

    first = await Refetch(load).repair(ctx, obs, judge(obs).exhausted())
    stored = [await st.topology.execute(k, "GET", k) for k in raw]
    second = await Refetch(load).repair(ctx, obs, judge(obs).exhausted())
    assert first.action is RepairAction.REWRITTEN
    assert second.action is RepairAction.LOST_RACE and second.consistent
    assert second.stamp == first.stamp
    assert [await st.topology.execute(k, "GET", k) for k in raw] == stored


def test_job_fields_are_the_stream_format() -> None:
    """Entries carry group, keys, seen (JSON), reason, enqueued_at: the documented format."""
    from stampede.repair._jobs import encode_fields

    fields = encode_fields(b"g", [b"g:a"], {"g:a": None}, "partial", 1.5, 0)
    assert {b"group", b"keys", b"seen", b"reason", b"enqueued_at"} <= set(fields)
    assert json.loads(fields[b"keys"]) == ["g:a"] and json.loads(fields[b"seen"]) == {"g:a": None}
