"""The repair queue and worker under review: waiting on undecided transactions, dead
letters that happen once, late workers, requeue past malformed dead letters, a queue
key of another type and consumer names, each driven through the real servers."""

from __future__ import annotations

import asyncio

import pytest

from stampede import Stampede
from stampede.errors import ConfigurationError, InvalidKeyError
from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker
from stampede.testing import LocalPrimaries

from ..support import run_cli


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
