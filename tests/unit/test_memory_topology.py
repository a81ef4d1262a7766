"""Reads, writes and repairs over the in-memory topology: the logic, without a server."""

from __future__ import annotations

import pytest

import stampede
from stampede import GuardCode, RetryPolicy, Stampede, TornReadError
from stampede.repair import NewestWins
from stampede.testing import drop_kept
from stampede.testing.faults import InjectedCrash, TearingTopology
from stampede.testing.memory import MemoryTopology, guard
from stampede.wire import new_token

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=None)


def spread(topology: MemoryTopology, prefix: str) -> list[str]:
    """Keys of one group on at least two shards."""
    keys = [f"{prefix}:{i}" for i in range(32)]
    chosen = [keys[0]]
    for key in keys[1:]:
        if topology.shard_of(key.encode()) != topology.shard_of(chosen[0].encode()):
            chosen.append(key)
            break
    return chosen


async def test_a_group_written_reads_back_whole() -> None:
    async with Stampede(MemoryTopology()) as st:
        keys = spread(st.topology, "user:7")  # type: ignore[arg-type]
        receipt = await st.write("user:7", dict.fromkeys(keys, b"v1"))
        got = await st.read("user:7", keys)
        assert got.consistent and got.token == receipt.token
        assert set(got.values.values()) == {b"v1"}


async def test_a_torn_write_reads_torn_and_is_repaired_whole() -> None:
    """A writer that died after one shard: the group reads torn once kept versions are
    gone, and NewestWins makes it whole under one stamp."""
    memory = MemoryTopology()
    async with Stampede(memory, options=stampede.Options(retry=QUICK)) as st:
        keys = spread(memory, "acct:1")
        await st.write("acct:1", dict.fromkeys(keys, b"old"))
        tearing = TearingTopology(memory)
        tearing.tear_next(reach=1)
        with pytest.raises(InjectedCrash):
            await Stampede(tearing).write("acct:1", dict.fromkeys(keys, b"new"))
        assert tearing.torn == 1
        assert (await st.read("acct:1", keys)).consistent  # the last whole write, kept
        await drop_kept(memory, keys)
        with pytest.raises(TornReadError):
            await st.read("acct:1", keys)
        repaired = await st.read("acct:1", keys, repair=NewestWins())
        assert repaired.repaired  # each key's newest value, under one stamp of its own
        after = await st.read("acct:1", keys)
        assert after.consistent and after.token == repaired.token
        assert after.values == repaired.values


async def test_an_older_write_is_kept_out_by_the_guard() -> None:
    memory = MemoryTopology(shards=1)
    outcome = await memory.write_guarded([b"k"], [b"5:" + new_token().encode() + b":x"],
                                         version=5, token=new_token())  # fmt: skip
    assert outcome.results[b"k"] == GuardCode.WRITTEN
    late = await memory.write_guarded([b"k"], [b"3:T:x"], version=3, token=new_token())
    assert late.results[b"k"] == GuardCode.KEPT


@pytest.mark.parametrize(
    ("stored", "version", "code"),
    [
        (None, b"5", GuardCode.WRITTEN),
        (b"plain value", b"5", GuardCode.WRITTEN),
        (b"7:01JD0000000000000000000000:x", b"5", GuardCode.KEPT),
        (b"5:01JD0000000000000000000000:x", b"5", GuardCode.SAME),
        (b"3:01JD0000000000000000000000", b"5", GuardCode.WRITTEN),
        (b"99999999999999999999:01JD0000000000000000000000:x", b"5", GuardCode.FOREIGN),
        (b"72057594037927936:01JD0000000000000000000000:x", b"5", GuardCode.MIXED),
    ],
)
def test_the_guard_decides_as_the_script_does(
    stored: bytes | None, version: bytes, code: GuardCode
) -> None:
    assert guard(stored, version, b"01JD0000000000000000000000", b"0") is code


async def test_counter_versions_and_commit_mode() -> None:
    options = stampede.Options(versions="counter", mode=stampede.Mode.COMMIT)
    async with Stampede(MemoryTopology(), options=options) as st:
        keys = spread(st.topology, "order:3")  # type: ignore[arg-type]
        first = await st.write("order:3", dict.fromkeys(keys, b"a"))
        second = await st.write("order:3", dict.fromkeys(keys, b"b"))
        assert (first.version, second.version) == (1, 2)
        got = await st.read("order:3", keys)
        assert got.consistent and got.version == 2


async def test_a_group_stamped_a_year_ahead_can_be_deleted() -> None:
    """The delete that clears a group stamped far ahead asks the server's clock (TIME),
    which the in-memory topology answers, as a server does."""
    topology = MemoryTopology()
    ahead = stampede.HybridClock(offset_ms=365 * 24 * 3600 * 1000)
    async with Stampede(topology) as st:
        keys = spread(topology, "skew")
        await st.write("skew", dict.fromkeys(keys, b"future"), versions=ahead)
        with pytest.raises(stampede.ClockSkewError):
            await st.write("skew", dict.fromkeys(keys, b"now"))
        assert (await st.delete("skew", keys)).superseded == ()
        assert (await st.read("skew", keys)).status is stampede.Status.NOT_FOUND
