"""stampede's own connections and lanes, against real servers (and a reply-losing proxy)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from stampede import OutcomeUnknownError
from stampede.testing import LocalPrimaries, RedisProxy
from stampede.topology._endpoint import Endpoint, parse_url
from stampede.topology._guard import GUARD_SHA
from stampede.topology._lane import Lane
from stampede.topology._resp import (
    ClientClosed,
    Connection,
    ConnectionLost,
    ConnectTimeout,
    NoScriptError,
    ReplyError,
    ReplyTimeout,
)
from stampede.topology._rounds import script_round


def _lane(url: str, **kwargs: Any) -> Lane:
    return Lane(parse_url(url), **kwargs)


async def test_a_pipeline_round_trip_returns_replies_and_error_replies(
    stampede_primaries: LocalPrimaries,
) -> None:
    """Replies in order; an error reply is that command's result, the lane stays usable."""
    lane = _lane(stampede_primaries.urls[0])
    try:
        replies = await lane.pipeline([("SET", "k", "v"), ("INCR", "k"), ("GET", "k")])
        assert replies[0] == b"OK" and replies[2] == b"v"
        assert isinstance(replies[1], ReplyError) and replies[1].code == "ERR"
        assert await lane.call("PING") == b"PONG"
    finally:
        await lane.aclose()


async def test_many_pipelines_share_a_connection_and_each_gets_its_own_replies(
    stampede_primaries: LocalPrimaries,
) -> None:
    """Pipelines sent together on one connection come back in order, each to its caller."""
    lane = _lane(stampede_primaries.urls[0], limit=1)
    try:
        await lane.pipeline([("SET", f"n:{i}", i) for i in range(200)])
        got = await asyncio.gather(*(lane.call("GET", f"n:{i}") for i in range(200)))
        assert got == [str(i).encode() for i in range(200)]
        assert lane.open_connections == 1
    finally:
        await lane.aclose()


async def test_a_lane_goes_round_its_idle_connections(
    stampede_primaries: LocalPrimaries,
) -> None:
    """Pipelines one after another take the lane's idle connections in turn (each
    pick looks at a few connections from where the last stopped, not at every one
    from the first), and a lane of twenty connections, some of them closed by the
    server, still serves every pipeline."""
    lane = _lane(stampede_primaries.urls[0], limit=32)
    try:
        held = [await lane.hold() for _ in range(3)]
        for conn in held:
            lane.release(conn, broken=False)
        ids = [await lane.call("CLIENT", "ID") for _ in range(6)]
        assert len(set(ids)) == 3 and ids[:3] == ids[3:]
        held = [await lane.hold() for _ in range(20)]
        for conn in held:
            lane.release(conn, broken=False)
        assert lane.open_connections == 20
        for client_id in ids:
            await lane.call("CLIENT", "KILL", "ID", client_id)
        got = await asyncio.gather(*(lane.call("ECHO", f"e{i}") for i in range(100)))
        assert got == [f"e{i}".encode() for i in range(100)]
        assert lane.open_connections <= 32
    finally:
        await lane.aclose()


async def test_a_cancelled_callers_replies_never_reach_the_next_caller(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A caller that gives up leaves its replies to be read and dropped, in order."""
    node = stampede_primaries.nodes[0]
    lane = _lane(node.url, limit=1)
    try:
        await lane.call("SET", "a", "first")
        await lane.call("SET", "b", "second")
        slow = asyncio.ensure_future(lane.pipeline([("DEBUG", "SLEEP", "0.2"), ("GET", "a")]))
        await asyncio.sleep(0.05)
        slow.cancel()
        assert await lane.call("GET", "b") == b"second"
    finally:
        await lane.aclose()


async def test_a_timeout_ends_the_connection_and_fails_everything_on_it(
    stampede_primaries: LocalPrimaries,
) -> None:
    """No reply in time: ReplyTimeout, and pipelines queued behind it fail too (their
    replies would no longer line up); a fresh connection works after."""
    node = stampede_primaries.nodes[0]
    conn = await Connection.open(parse_url(node.url).at(node.host, node.port))
    try:
        node.pause()
        first = conn.send([("GET", "x")], timeout=0.2)
        second = conn.send([("GET", "y")], timeout=5)
        with pytest.raises(ReplyTimeout):
            await first
        with pytest.raises(ReplyTimeout):
            await second
        assert not conn.usable
    finally:
        node.resume()
        conn.close()
    lane = _lane(node.url)
    try:
        assert await lane.call("PING") == b"PONG"
    finally:
        await lane.aclose()


async def test_a_connection_the_server_closed_is_replaced(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A killed connection: idempotent commands go again on a new one."""
    lane = _lane(stampede_primaries.urls[0], retries=2)
    other = _lane(stampede_primaries.urls[0])
    try:
        ident = await lane.call("CLIENT", "ID")
        await other.call("CLIENT", "KILL", "ID", ident)
        assert await lane.call("PING") == b"PONG"
    finally:
        await lane.aclose()
        await other.aclose()


async def test_an_argument_that_cannot_be_sent_is_refused_before_sending(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A None (or a bool) is a TypeError naming the type; nothing reaches the server."""
    lane = _lane(stampede_primaries.urls[0])
    try:
        with pytest.raises(TypeError, match="NoneType"):
            await lane.call("SET", "k", None)
        assert await lane.call("SET", "k", bytearray(b"v")) == b"OK"
        assert await lane.call("GET", "k") == b"v"
    finally:
        await lane.aclose()


@pytest.mark.parametrize(
    ("command", "check", "applied"),
    [
        (("INCR", "n"), ("GET", "n"), b"1"),
        (("XADD", "s", "*", "f", "v"), ("XLEN", "s"), 1),
        (("DEL", "d"), ("EXISTS", "d"), 0),
    ],
)
async def test_a_non_idempotent_command_whose_reply_was_lost_is_not_resent(
    stampede_primaries: LocalPrimaries,
    command: tuple[str, ...],
    check: tuple[str, ...],
    applied: Any,
) -> None:
    """INCR, XADD, DEL: the server ran it, the reply was lost: OutcomeUnknownError, sent once."""
    direct = _lane(stampede_primaries.urls[0])
    await direct.call("SET", "d", "x")
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        lane = _lane(proxy.url, retries=3)
        rule = proxy.drop_reply(lambda cmd: cmd[0].decode() == command[0])
        try:
            with pytest.raises(OutcomeUnknownError, match=command[0]) as info:
                await lane.call(*command)
            assert info.value.shard == proxy.address
            assert rule.hits == 1
            assert proxy.count(lambda cmd: cmd[0].decode() == command[0]) == 1
            assert await lane.call(*check) == applied
        finally:
            await lane.aclose()
            await direct.aclose()


async def test_reads_and_guarded_writes_whose_reply_was_lost_are_resent(
    stampede_primaries: LocalPrimaries,
) -> None:
    """GET, MGET and a guarded-script call are idempotent: sent again on a new connection."""
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        lane = _lane(proxy.url, retries=1)
        try:
            await lane.call("SET", "k", "v")
            proxy.drop_reply(lambda cmd: cmd[0] == b"GET")
            proxy.drop_reply(lambda cmd: cmd[0] == b"MGET")
            assert await lane.call("GET", "k") == b"v"
            assert await lane.call("MGET", "k") == [b"v"]
            assert proxy.count(lambda cmd: cmd[0] in (b"GET", b"MGET")) == 4
            await lane.call("SCRIPT", "FLUSH")
            with pytest.raises(NoScriptError):
                await lane.call("EVALSHA", GUARD_SHA, 0)
            proxy.drop_reply(lambda cmd: cmd[0] == b"EVALSHA")
            with pytest.raises(NoScriptError):  # the resent call's own reply
                await lane.call("EVALSHA", GUARD_SHA, 0)
            assert proxy.count(lambda cmd: cmd[0] == b"EVALSHA") == 3
        finally:
            await lane.aclose()


async def test_a_refused_connection_is_a_connection_error_not_a_hang() -> None:
    """Nothing listens: ConnectionLost after the retries, quickly."""
    lane = Lane(parse_url("redis://127.0.0.1:1"), retries=1, retry_base=0.001)
    with pytest.raises(ConnectionLost, match=r"127\.0\.0\.1:1"):
        await lane.call("PING")


@asynccontextmanager
async def _silent_server(hello: asyncio.Event) -> AsyncIterator[Endpoint]:
    """A server that takes connections and never answers (`hello` set once one sent
    something); the endpoint of a client that sends a hello (AUTH) and waits for it
    for an hour."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        hello.set()
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Endpoint("127.0.0.1", port, password="secret", connect_timeout=3600.0)
    finally:
        server.close()


async def test_a_connection_cancelled_during_its_hello_closes_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The opener is cancelled once its hello is in: the socket is closed by then, not
    left open until its connect_timeout."""
    hello = asyncio.Event()
    made: list[Connection] = []
    born = Connection.connection_made

    def noted(self: Connection, transport: asyncio.BaseTransport) -> None:
        made.append(self)
        born(self, transport)

    monkeypatch.setattr(Connection, "connection_made", noted)
    async with _silent_server(hello) as endpoint:
        opening = asyncio.ensure_future(Connection.open(endpoint))
        await hello.wait()
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        (conn,) = made
        assert not conn.usable  # closed, its pipelines failed


async def test_aclose_ends_a_round_still_waiting_to_connect() -> None:
    """A round of scripts corked for a lane with no connection waits for one in a task;
    `aclose` ends that task before it returns (nothing was sent), and the round's
    caller hears that the client was closed."""
    hello = asyncio.Event()
    async with _silent_server(hello) as endpoint:
        lane = Lane(endpoint)

        async def resume(i: int, first: Any) -> list[Any]:
            assert first is None  # never sent
            return await lane.pipeline([("PING",)])

        caller = asyncio.ensure_future(script_round([lane], [[("PING",)]], resume))
        await hello.wait()  # the round's task is connecting, its hello unanswered
        await lane.aclose()
        rounds = [t for t in asyncio.all_tasks() if "_Cork" in repr(t.get_coro())]
        assert rounds == []  # (the round's own task; the server's are the server's)
        (result,) = await caller
        assert isinstance(result, ClientClosed)


async def test_a_round_corked_when_its_lane_closes_starts_no_task() -> None:
    """The lane is closed in the same loop turn as a round is corked for it: the
    turn's flush sends nothing and starts no task that would outlive `aclose`."""
    hello = asyncio.Event()
    async with _silent_server(hello) as endpoint:
        lane = Lane(endpoint)

        async def resume(i: int, first: Any) -> list[Any]:
            assert first is None  # never sent
            return await lane.pipeline([("PING",)])

        caller = asyncio.ensure_future(script_round([lane], [[("PING",)]], resume))
        await asyncio.sleep(0)  # the round is corked; its flush waits for the turn's end
        await lane.aclose()
        await asyncio.sleep(0)  # the turn ends: its flush runs
        rounds = [t for t in asyncio.all_tasks() if "_Cork" in repr(t.get_coro())]
        assert rounds == []
        (result,) = await caller
        assert isinstance(result, ClientClosed)
        assert not hello.is_set()  # no connection was opened


async def test_a_burst_of_callers_opens_a_few_connections_not_one_each(
    stampede_primaries: LocalPrimaries,
) -> None:
    """256 callers at once on a lane with room for 1024 connections: they share the
    first few it opens (pipelined), where each used to open its own, kept open after."""
    node = stampede_primaries.nodes[0]
    lane = _lane(node.url, limit=1024)
    try:
        got = await asyncio.gather(*(lane.call("ECHO", f"e{i}") for i in range(256)))
        assert got == [f"e{i}".encode() for i in range(256)]
        assert lane.open_connections <= 8
        names = [c for c in node.client().client_list() if c["cmd"] != "client|list"]
        assert len(names) <= 8, names
    finally:
        await lane.aclose()


async def test_callers_waiting_on_a_connection_being_opened_try_their_own_once_one_fails(
    stampede_primaries: LocalPrimaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that accepts but never answers (paused; the hello names the client, so
    opening waits for its answer): 64 callers, of whom 8 are opening a connection and
    the rest wait for those, each get the connect timeout: once the first attempts
    fail, every waiting caller makes its own attempt at once, not 8 at a time behind
    the failures of those before it (8 timeouts in a row for the last ones)."""
    node = stampede_primaries.nodes[0]
    endpoint = parse_url(node.url)
    hanging = Endpoint(endpoint.host, endpoint.port, client_name="burst", connect_timeout=0.5)
    lane = Lane(hanging, limit=1024)
    failed = 0
    seen: list[int] = []  # per attempt, how many attempts had failed when it began
    real_open = Connection.open

    async def counted(ep: Endpoint) -> Connection:
        nonlocal failed
        seen.append(failed)
        try:
            return await real_open(ep)
        except BaseException:
            failed += 1
            raise

    monkeypatch.setattr(Connection, "open", staticmethod(counted))
    node.pause()
    try:
        got = await asyncio.gather(*(lane.call("PING") for _ in range(64)), return_exceptions=True)
    finally:
        node.resume()
        await lane.aclose()
    assert all(isinstance(e, ConnectTimeout) for e in got), got
    assert len(seen) == 64 and seen.count(0) == 8, seen
    assert max(seen) <= 8, seen  # the rest began once the first ones had failed


async def test_sessions_being_opened_do_not_hold_up_a_pipeline(
    stampede_primaries: LocalPrimaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve sessions' connections still being opened (a burst of WAITs or WATCHes)
    are not the pipelines' own: a pipeline opens its connection beside them and is
    answered, where it waited for them to open first."""
    lane = _lane(stampede_primaries.urls[0], limit=1024)
    gate, all_held = asyncio.Event(), asyncio.Event()
    real_open = Connection.open
    held = 0

    async def gated(ep: Endpoint) -> Connection:
        nonlocal held
        if held < 12:  # the sessions' attempts wait at the gate
            held += 1
            if held == 12:
                all_held.set()
            await gate.wait()
        return await real_open(ep)

    monkeypatch.setattr(Connection, "open", staticmethod(gated))
    sessions = [asyncio.ensure_future(lane.hold()) for _ in range(12)]
    try:
        await all_held.wait()
        async with asyncio.timeout(60):  # (a hang guard, not a measure)
            assert await lane.call("PING") == b"PONG"
        assert not any(s.done() for s in sessions)
    finally:
        gate.set()
        for conn in await asyncio.gather(*sessions):
            lane.release(conn, broken=False)
        await lane.aclose()
