"""A lone batch's round trip without a task, and the connection's one timer.

A coalescer given a `Quick` writes a batch at once and finishes it from the
connection's callback (`Lane.send_now`); what that path will not take as it is
goes on in a task from the answer it got, by the lane's retry rules. These tests
hold that path to the task path's answers, errors and resends, and check the
connection's single timer (one per connection, at the earliest deadline).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import stampede
from stampede import OutcomeUnknownError, ShardTimeout, ShardUnavailable, Stampede
from stampede.options import ConnectOptions
from stampede.testing import LocalPrimaries, RedisProxy
from stampede.topology._coalesce import Coalescer
from stampede.topology._endpoint import parse_url
from stampede.topology._lane import Lane, Sent
from stampede.topology._resp import Connection, ConnectionLost, ReplyTimeout

from ..support import spread_keys, tasks_created

# -- the coalescer's quick path (pure asyncio) --------------------------------------


class HandQuick:
    """A `Quick` whose round trips are answered by the test (`answer`)."""

    def __init__(self, *, can_send: bool = True, broken: bool = False) -> None:
        self.can_send = can_send
        self.broken = broken
        self.sent: list[tuple[list[str], Callable[[Any], None]]] = []
        self.resumed: list[tuple[list[str], Any]] = []
        self.started = asyncio.Event()

    def start(self, requests: list[str], then: Callable[[Any], None]) -> bool:
        if self.broken:
            raise TypeError("cannot send that")
        if not self.can_send:
            return False
        self.sent.append((list(requests), then))
        self.started.set()
        return True

    def finish(self, requests: list[str], answer: Any) -> list[Any] | None:
        return None if answer == "lost" else [r.upper() for r in requests]

    async def resume(self, requests: list[str], answer: Any) -> list[Any]:
        self.resumed.append((list(requests), answer))
        await asyncio.sleep(0)
        return [f"{r}!" for r in requests]

    def answer(self, batch: int, answer: Any = "ok") -> None:
        self.sent[batch][1](answer)


async def _batch_function(requests: list[str]) -> list[Any]:
    if any(r == "bad" for r in requests):
        raise TypeError("cannot send that")
    return [f"{r} by task" for r in requests]


def _coalescer(quick: HandQuick) -> Coalescer[str, Any]:
    return Coalescer(_batch_function, quick=quick)


def _idle(coalescer: Coalescer[str, Any]) -> bool:
    return coalescer.idle


async def test_a_lone_batch_is_sent_at_once_without_a_task() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    tasks = asyncio.all_tasks()
    future = coalescer.submit("a")
    assert [requests for requests, _ in quick.sent] == [["a"]]  # before any loop turn
    assert asyncio.all_tasks() == tasks
    assert not _idle(coalescer)
    quick.answer(0)
    assert _idle(coalescer)
    assert await future == "A"


async def test_an_answer_finish_will_not_take_goes_on_in_a_task_from_that_answer() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    future = coalescer.submit("a")
    quick.answer(0, "lost")
    assert not coalescer.idle  # the task that carries on is in flight
    assert await future == "a!"
    assert quick.resumed == [(["a"], "lost")]
    await coalescer.aclose()
    assert coalescer.idle


async def test_requests_behind_a_lone_batch_queue_and_go_together() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    first = coalescer.submit("a")
    rest = [coalescer.submit(r) for r in "bcd"]
    assert len(quick.sent) == 1
    await asyncio.sleep(0)  # the next loop turn: one more batch may go (two in flight)
    assert [requests for requests, _ in quick.sent] == [["a"], ["b", "c", "d"]]
    quick.answer(1)
    quick.answer(0)
    assert await asyncio.gather(first, *rest) == list("ABCD")


async def test_a_queue_waiting_on_two_lone_batches_goes_when_one_answers() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    futures = [coalescer.submit("a")]
    futures.append(coalescer.submit("b"))
    await asyncio.sleep(0)
    futures += [coalescer.submit(r) for r in "cd"]
    await asyncio.sleep(0)
    assert len(quick.sent) == 2  # two out: c and d wait
    quick.answer(0)  # one back: the queue goes at once, from the answer's callback
    assert [requests for requests, _ in quick.sent][2] == ["c", "d"]
    quick.answer(1)
    quick.answer(2)
    assert await asyncio.gather(*futures) == list("ABCD")


async def test_a_caller_that_gave_up_leaves_its_batch_mates_their_answers() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    first = coalescer.submit("a")
    mates = [coalescer.submit(r) for r in "bc"]
    await asyncio.sleep(0)
    mates[0].cancel()
    quick.answer(1)
    quick.answer(0)
    assert await first == "A" and await mates[1] == "C"
    assert mates[0].cancelled()


async def test_start_that_cannot_send_leaves_the_batch_to_a_task() -> None:
    quick = HandQuick(can_send=False)
    coalescer = _coalescer(quick)
    assert await coalescer.submit("a") == "a by task"
    assert quick.sent == []


async def test_start_that_raises_leaves_the_error_to_the_batch_function() -> None:
    coalescer = _coalescer(HandQuick(broken=True))
    with pytest.raises(TypeError, match="cannot send that"):
        await coalescer.submit("bad")
    await coalescer.aclose()
    assert coalescer.idle


async def test_call_goes_the_quick_way_too() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    call = asyncio.ensure_future(coalescer.call("a"))
    await quick.started.wait()
    quick.answer(0)
    assert await call == "A"


async def test_aclose_waits_for_lone_batches_in_flight() -> None:
    quick = HandQuick()
    coalescer = _coalescer(quick)
    future = coalescer.submit("a")
    closing = [asyncio.ensure_future(coalescer.aclose()) for _ in range(2)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not any(c.done() for c in closing)
    quick.answer(0, "lost")  # ... and for the task that carries on
    await asyncio.gather(*closing)
    assert future.result() == "a!"


async def test_lone_reads_and_writes_over_several_shards_start_no_task(st: Stampede) -> None:
    """With connections open, a lone read or write spanning shards (or nodes) makes
    its round trips without a task: none is created while it runs."""
    keys = spread_keys(st, "lone:spread")
    await st.write("lone:spread", dict.fromkeys(keys, b"warm"))  # connections open
    await st.read("lone:spread", keys)
    with tasks_created() as created:
        receipt = await st.write("lone:spread", dict.fromkeys(keys, b"lone"))
        result = await st.read("lone:spread", keys)
    assert created == []
    assert result.version == receipt.version
    assert result.values == dict.fromkeys(keys, b"lone")


# -- the connection's one timer -------------------------------------------------------


async def _connection(primaries: LocalPrimaries, socket_timeout: float) -> Connection:
    node = primaries.nodes[0]
    options = ConnectOptions(socket_timeout=socket_timeout)
    return await Connection.open(parse_url(node.url, options).at(node.host, node.port))


async def test_the_timer_fails_a_callback_pipeline_past_its_deadline_once(
    stampede_primaries: LocalPrimaries,
) -> None:
    conn = await _connection(stampede_primaries, 0.2)
    got: list[Any] = []
    answered = asyncio.Event()

    def then(result: Any) -> None:
        got.append(result)
        answered.set()

    node = stampede_primaries.nodes[0]
    try:
        node.pause()
        conn.send_then([("GET", "x")], then)
        behind = conn.send([("GET", "y")], timeout=30)
        await answered.wait()
        with pytest.raises(ReplyTimeout):
            await behind
    finally:
        node.resume()
        conn.close()
    assert len(got) == 1 and isinstance(got[0], ReplyTimeout)
    assert not conn.usable


async def test_a_shorter_deadline_arms_the_timer_earlier(
    stampede_primaries: LocalPrimaries,
) -> None:
    """The timer armed for a 30 s pipeline moves to a 0.2 s one sent behind it."""
    conn = await _connection(stampede_primaries, 30)
    node = stampede_primaries.nodes[0]
    try:
        node.pause()
        first = conn.send([("GET", "x")])
        second = conn.send([("GET", "y")], timeout=0.2)
        done, _ = await asyncio.wait([first, second], timeout=10)
        assert len(done) == 2, "the earlier deadline did not fire"
        assert isinstance(first.exception(), ReplyTimeout)
        assert isinstance(second.exception(), ReplyTimeout)
    finally:
        node.resume()
        conn.close()


async def test_the_timer_of_an_answered_pipeline_goes_on_to_the_next(
    stampede_primaries: LocalPrimaries,
) -> None:
    """The timer stays armed after its pipeline was answered; when it fires, the
    pipeline pending then is not yet due, and it is armed again for that one."""
    conn = await _connection(stampede_primaries, 0.4)
    node = stampede_primaries.nodes[0]
    try:
        assert await conn.send([("PING",)]) == [b"PONG"]
        await asyncio.sleep(0.2)
        node.pause()
        with pytest.raises(ReplyTimeout):
            await conn.send([("GET", "x")])
    finally:
        node.resume()
        conn.close()


async def test_a_wait_extends_its_own_pipelines_deadline(
    stampede_primaries: LocalPrimaries,
) -> None:
    """WAIT held 1.5 s by the server (no replica) under a 1 s socket timeout: no timeout,
    and the connection goes on."""
    conn = await _connection(stampede_primaries, 1.0)
    try:
        assert await conn.send([("WAIT", 1, 1500)]) == [0]
        assert conn.usable
        assert await conn.send([("PING",)]) == [b"PONG"]
    finally:
        conn.close()


# -- lost and late replies on the callback path -----------------------------------------

KEYS = ["lone:{1}:a", "lone:{1}:b"]


async def _read_counting(proxy: RedisProxy, retries: int) -> tuple[stampede.Stampede, int]:
    options = ConnectOptions(socket_timeout=5.0, connect_timeout=1.0, connection_retries=retries)
    st = stampede.connect([proxy.url], connection=options)
    await st.write("lone:{1}", dict.fromkeys(KEYS, b"v"))
    return st, proxy.count(lambda cmd: cmd[0] == b"MGET")


@pytest.mark.parametrize("retries", [0, 1])
async def test_a_lone_read_whose_reply_was_lost_follows_the_lane_rules(
    stampede_primaries: LocalPrimaries, retries: int
) -> None:
    """Sent without a task, its reply lost: resent `retries` times, as the task path
    would (not once more), else `ShardUnavailable`."""
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        st, before = await _read_counting(proxy, retries)
        try:
            proxy.drop_reply(lambda cmd: cmd[0] == b"MGET")
            if retries:
                assert (await st.read("lone:{1}", KEYS)).values == dict.fromkeys(KEYS, b"v")
            else:
                with pytest.raises(ShardUnavailable, match="connection failed"):
                    await st.read("lone:{1}", KEYS)
            assert proxy.count(lambda cmd: cmd[0] == b"MGET") - before == 1 + retries
        finally:
            await st.aclose()


async def test_a_lone_guarded_write_whose_reply_was_lost_is_resent_once(
    stampede_primaries: LocalPrimaries,
) -> None:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        st, _ = await _read_counting(proxy, 1)
        try:
            before = proxy.count(lambda cmd: cmd[0] == b"EVALSHA")
            proxy.drop_reply(lambda cmd: cmd[0] == b"EVALSHA")
            receipt = await st.write("lone:{1}", dict.fromkeys(KEYS, b"w"))
            assert proxy.count(lambda cmd: cmd[0] == b"EVALSHA") - before == 2
            result = await st.read("lone:{1}", KEYS)
            assert (result.version, result.values) == (receipt.version, dict.fromkeys(KEYS, b"w"))
        finally:
            await st.aclose()


async def test_a_lone_read_past_the_socket_timeout_is_a_shard_timeout_never_resent(
    stampede_primaries: LocalPrimaries,
) -> None:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        options = ConnectOptions(socket_timeout=0.2, connect_timeout=1.0, connection_retries=3)
        st = stampede.connect([proxy.url], connection=options)
        try:
            await st.topology.fetch([b"lone:{1}:a"])  # connected
            proxy.delay_reply(lambda cmd: cmd[0] == b"MGET", 5.0)
            with pytest.raises(ShardTimeout):
                await st.topology.fetch([k.encode() for k in KEYS])
            assert proxy.count(lambda cmd: cmd[0] == b"MGET") == 2
        finally:
            await st.aclose()


async def test_a_non_idempotent_first_attempt_whose_reply_was_lost_is_never_resent(
    stampede_primaries: LocalPrimaries,
) -> None:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        lane = Lane(parse_url(proxy.url), retries=3)
        try:
            assert await lane.call("PING") == b"PONG"  # a connection at hand
            proxy.drop_reply(lambda cmd: cmd[0] == b"INCR")
            ended: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
            assert lane.send_now([("INCR", "lone:n")], ended.set_result)
            sent = await ended
            assert isinstance(sent.result, ConnectionLost)
            with pytest.raises(OutcomeUnknownError, match="INCR"):
                await lane.pipeline([("INCR", "lone:n")], first=sent)
            assert proxy.count(lambda cmd: cmd[0] == b"INCR") == 1
            # a `Sent` is taken once: the same call again sends anew
            assert await lane.pipeline([("INCR", "lone:n")], first=sent) == [2]
        finally:
            await lane.aclose()


async def test_send_now_without_a_connection_at_hand_sends_nothing(
    stampede_primaries: LocalPrimaries,
) -> None:
    lane = Lane(parse_url(stampede_primaries.urls[0]))
    try:
        assert not lane.send_now([("PING",)], lambda _: None)  # none opened yet
        assert await lane.call("PING") == b"PONG"
        assert not lane.send_now([("WAIT", 0, 10)], lambda _: None)  # blocks: held apart
    finally:
        await lane.aclose()


async def test_a_cancelled_lone_read_leaves_the_next_read_its_own_answer(
    stampede_primaries: LocalPrimaries,
) -> None:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        st, _ = await _read_counting(proxy, 1)
        try:
            await st.write("lone:{2}", {"lone:{2}:a": b"other"})
            proxy.delay_reply(lambda cmd: cmd[0] == b"MGET", 0.3)
            slow = asyncio.ensure_future(st.read("lone:{1}", KEYS))
            await asyncio.sleep(0)  # its first step: the MGET is written, no task of its own
            slow.cancel()
            result = await st.read("lone:{2}", ["lone:{2}:a"])
            assert result.values == {"lone:{2}:a": b"other"}
            assert slow.cancelled()
            assert (await st.read("lone:{1}", KEYS)).values == dict.fromkeys(KEYS, b"v")
        finally:
            await st.aclose()
