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
from .test_lost_replies import Proxied, px  # noqa: F401 - the proxied fixture
from .test_queue_review import _drop_script_reply


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
