"""Coalescing: requests of one loop turn share a round trip, each caller gets its own answer.

The `Coalescer` itself is pure asyncio (its batch function is a plain coroutine
here); the end-to-end tests run real batches against real servers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stampede import PartialWriteError, Stampede
from stampede.topology._base import ReadWatch
from stampede.topology._coalesce import Coalescer, Fanin

from ..support import spread_keys


class Recorder:
    """A batch function that records each batch and can be held until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, requests: list[str]) -> list[Any]:
        self.batches.append(list(requests))
        await self.gate.wait()
        return [ValueError(r) if r.startswith("bad") else r.upper() for r in requests]


async def test_a_lone_request_goes_at_once() -> None:
    """An idle coalescer sends a request without waiting for the next loop turn."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run)
    future = coalescer.submit("a")
    await asyncio.sleep(0)  # one step: the batch task has started
    assert run.batches == [["a"]]
    assert await future == "A"


async def test_requests_behind_a_batch_in_flight_ride_together() -> None:
    """While one batch is in flight, the requests of a loop turn become one batch."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run)
    run.gate.clear()
    first = coalescer.submit("a")
    await asyncio.sleep(0)
    rest = [coalescer.submit(r) for r in "bcdef"]
    await asyncio.sleep(0)
    run.gate.set()
    assert await asyncio.gather(first, *rest) == list("ABCDEF")
    assert run.batches == [["a"], list("bcdef")]


async def test_batches_are_bounded() -> None:
    """No batch carries more than `max_items` items, and no request is split."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run, max_items=4, size=len)
    run.gate.clear()
    first = coalescer.submit("x")
    await asyncio.sleep(0)
    rest = [coalescer.submit(r) for r in ("ab", "cd", "ef", "g", "hij")]
    await asyncio.sleep(0)
    run.gate.set()
    await asyncio.gather(first, *rest)
    assert run.batches == [["x"], ["ab", "cd"], ["ef", "g"], ["hij"]]


async def test_one_failing_request_fails_only_its_caller() -> None:
    """A per-request error reaches that caller; the others of its batch get results."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run)
    run.gate.clear()
    futures = [coalescer.submit(r) for r in ("a", "b", "bad", "c")]
    await asyncio.sleep(0)
    run.gate.set()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[0:2] == ["A", "B"] and results[3] == "C"
    assert isinstance(results[2], ValueError)


async def test_a_failed_round_trip_reaches_every_caller_of_its_batch() -> None:
    """An error of the whole batch (the connection failed) goes to all of its callers."""

    async def broken(requests: list[str]) -> list[Any]:
        raise ConnectionError("gone")

    coalescer: Coalescer[str, Any] = Coalescer(broken)
    futures = [coalescer.submit(r) for r in "abc"]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_a_cancelled_caller_leaves_the_others_alone() -> None:
    """Cancelling one waiting caller does not disturb its batch-mates."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run)
    run.gate.clear()
    futures = [coalescer.submit(r) for r in "abc"]
    await asyncio.sleep(0)
    futures[1].cancel()
    run.gate.set()
    assert await futures[0] == "A" and await futures[2] == "C"
    await coalescer.aclose()


async def test_batches_in_flight_are_bounded_and_the_rest_ride_together() -> None:
    """With two batches out, later requests wait and go as one when a batch returns."""
    run = Recorder()
    coalescer: Coalescer[str, Any] = Coalescer(run)
    run.gate.clear()
    first = coalescer.submit("a")  # idle: goes at once
    await asyncio.sleep(0)
    second = coalescer.submit("b")  # one out: the next loop turn
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    rest = [coalescer.submit(r) for r in "cde"]
    for _ in range(3):
        await asyncio.sleep(0)
    assert run.batches == [["a"], ["b"]]  # two out: c, d, e wait
    run.gate.set()
    assert await asyncio.gather(first, second, *rest) == list("ABCDE")
    assert run.batches == [["a"], ["b"], ["c", "d", "e"]]


async def test_a_fanin_resolves_once_every_part_is_in_and_knows_what_is_owed() -> None:
    run, other = Recorder(), Recorder()
    left: Coalescer[str, Any] = Coalescer(run)
    right: Coalescer[str, Any] = Coalescer(other)
    other.gate.clear()
    fanin = Fanin(2)
    left.add("x", fanin, 0)
    right.add("bad", fanin, 1)
    await asyncio.sleep(0.01)
    assert not fanin.future.done() and fanin.owed() == [1]
    watch = ReadWatch()
    watch.waiting_on(["left", "right"], fanin)
    assert watch.waiting == ["right"]
    other.gate.set()
    results = await fanin.future
    assert results[0] == "X" and isinstance(results[1], ValueError)
    assert fanin.owed() == []


async def test_a_fanin_given_up_keeps_what_was_owed() -> None:
    """A caller that gave up (its read's deadline) still knows which shard was late."""
    run = Recorder()
    slow: Coalescer[str, Any] = Coalescer(run)
    run.gate.clear()
    fanin = Fanin(1)
    slow.add("x", fanin, 0)
    fanin.future.cancel()
    run.gate.set()
    await slow.aclose()
    assert fanin.owed() == [0]


# -- against real servers ---------------------------------------------------------------


async def _script_calls(st: Stampede) -> int:
    total = 0
    for shard in st.topology.shard_names:
        stats = await st.topology.execute_on(shard, "INFO", "commandstats")
        text = stats.decode() if isinstance(stats, bytes) else str(stats)
        for line in text.splitlines():
            if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
                total += int(line.split("calls=")[1].split(",")[0])
    return total


async def _reset_stats(st: Stampede) -> None:
    for shard in st.topology.shard_names:
        await st.topology.execute_on(shard, "CONFIG", "RESETSTAT")


async def test_concurrent_writes_share_round_trips(st: Stampede) -> None:
    """Forty concurrent writes of a 4-key group: far fewer script calls than writes."""
    keys = spread_keys(st, "coal")
    await st.write("coal", dict.fromkeys(keys, b"warm"))  # scripts loaded everywhere
    await _reset_stats(st)
    receipts = await asyncio.gather(
        *(st.write("coal", dict.fromkeys(keys, str(i))) for i in range(40))
    )
    calls = await _script_calls(st)
    assert len(receipts) == 40
    # Unbatched, each write would call the guard once per shard it touches (>= 2).
    assert calls < 40, calls
    newest = max(receipts, key=lambda r: (r.version, r.token))
    result = await st.read("coal", keys)
    assert (result.version, result.token) == (newest.version, newest.token)


async def test_a_bad_key_fails_only_its_own_write(st: Stampede) -> None:
    """A write whose key holds a list fails alone; writes batched with it succeed."""
    good = spread_keys(st, "mates")
    bad_group = spread_keys(st, "spoilt")
    await st.topology.execute(bad_group[0].encode(), "RPUSH", bad_group[0], "x")
    outcomes = await asyncio.gather(
        *(st.write("mates", dict.fromkeys(good, str(i))) for i in range(10)),
        st.write("spoilt", dict.fromkeys(bad_group, "y")),
        return_exceptions=True,
    )
    assert all(not isinstance(o, BaseException) for o in outcomes[:10]), outcomes
    spoilt = outcomes[10]
    assert isinstance(spoilt, PartialWriteError)
    assert "WRONGTYPE" in str(spoilt)
    assert (await st.read("mates", good)).consistent


@pytest.mark.parametrize("concurrency", [1, 25])
async def test_reads_come_back_to_their_own_callers(st: Stampede, concurrency: int) -> None:
    """Concurrent reads of different groups each get their own group's values."""
    groups = {f"own{i}": spread_keys(st, f"own{i}", 3) for i in range(concurrency)}
    for group, keys in groups.items():
        await st.write(group, {k: f"{group}:{k}" for k in keys})
    results = await asyncio.gather(*(st.read(g, keys) for g, keys in groups.items()))
    for (group, keys), result in zip(groups.items(), results, strict=True):
        assert result.values == {k: f"{group}:{k}".encode() for k in keys}
