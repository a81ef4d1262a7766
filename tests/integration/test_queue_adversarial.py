"""The repair queue attacked: stream entries deleted by hand, a worker named as the
queue's own bookkeeping, replies lost on the queue's scripts, a requeue racing a
publish; each driven through the real servers."""

from __future__ import annotations

import asyncio

import pytest

from stampede import Stampede
from stampede.errors import ConfigurationError
from stampede.repair import CONSUMER_GROUP, NewestWins, RepairQueue
from stampede.repair._jobs import HANDED_BACK
from stampede.repair._worker import Worker
from stampede.testing import LocalPrimaries

from ..support import run_cli


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
