"""The lean connection lane: its own send path keeps redis-py's error semantics."""

from __future__ import annotations

from typing import Any

import pytest
from redis import exceptions as rex
from redis.asyncio import Redis

from stampede import OutcomeUnknownError
from stampede.testing import LocalPrimaries, RedisProxy
from stampede.topology.guard import GUARD_SHA
from stampede.topology.lane import Lane, send


async def test_a_pipeline_round_trip_returns_replies_and_error_replies(
    redis_primaries: LocalPrimaries,
) -> None:
    """Replies in order; an error reply is that command's result, the lane stays usable."""
    client = Redis.from_url(redis_primaries.urls[0])
    lane = Lane(client)
    try:
        replies = await lane.pipeline([("SET", "k", "v"), ("INCR", "k"), ("GET", "k")])
        assert replies[0] == b"OK" and replies[2] == b"v"
        assert isinstance(replies[1], rex.ResponseError)
        assert await lane.call("PING") == b"PONG"
    finally:
        await lane.aclose()
        await client.aclose()


async def test_a_send_that_cannot_drain_times_out_and_drops_the_connection(
    redis_primaries: LocalPrimaries,
) -> None:
    """A paused server stops reading: a big write times out as redis-py's TimeoutError."""
    node = redis_primaries.nodes[0]
    client = Redis.from_url(node.url, socket_timeout=0.5)
    conn = _connection(client)
    await conn.connect()
    node.pause()
    try:
        with pytest.raises(rex.TimeoutError, match="writing to socket"):
            await send(conn, b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$67108864\r\n" + b"x" * 2**26)
        assert not conn.is_connected
    finally:
        node.resume()
        await conn.disconnect()
        await client.aclose()


async def test_a_connection_the_server_closed_fails_as_a_connection_error(
    redis_primaries: LocalPrimaries,
) -> None:
    """A killed connection: redis-py's ConnectionError; the lane retries on a new one."""
    client = Redis.from_url(redis_primaries.urls[0], socket_timeout=2)
    conn = _connection(client)
    await conn.connect()
    await client.client_kill_filter(_id=str(await _client_id(conn)))
    with pytest.raises(rex.ConnectionError):
        await send(conn, b"*1\r\n$4\r\nPING\r\n")
        await conn.read_response()
    await conn.disconnect()

    lane = Lane(client)
    try:
        (ident,) = await lane.pipeline([("CLIENT", "ID")])
        await client.client_kill_filter(_id=str(ident))
        # Nothing was answered on the dead connection, so the lane sends again.
        assert await lane.call("PING") == b"PONG"
    finally:
        await lane.aclose()
        await client.aclose()


@pytest.mark.parametrize(
    ("command", "check", "applied"),
    [
        (("INCR", "n"), ("GET", "n"), b"1"),
        (("XADD", "s", "*", "f", "v"), ("XLEN", "s"), 1),
        (("DEL", "d"), ("EXISTS", "d"), 0),
    ],
)
async def test_a_non_idempotent_command_whose_reply_was_lost_is_not_resent(
    redis_primaries: LocalPrimaries, command: tuple[str, ...], check: tuple[str, ...], applied: Any
) -> None:
    """INCR, XADD, DEL: the server ran it, the reply was lost: OutcomeUnknownError, sent once."""
    direct = Redis.from_url(redis_primaries.urls[0])
    await direct.set("d", "x")
    async with RedisProxy(redis_primaries.nodes[0].address) as proxy:
        client = Redis.from_url(proxy.url)
        lane = Lane(client, retries=3)
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
            await client.aclose()
            await direct.aclose()


async def test_reads_and_guarded_writes_whose_reply_was_lost_are_resent(
    redis_primaries: LocalPrimaries,
) -> None:
    """GET, MGET and a guarded-script call are idempotent: sent again on a new connection."""
    async with RedisProxy(redis_primaries.nodes[0].address) as proxy:
        client = Redis.from_url(proxy.url)
        lane = Lane(client, retries=1)
        try:
            await lane.call("SET", "k", "v")
            proxy.drop_reply(lambda cmd: cmd[0] == b"GET")
            proxy.drop_reply(lambda cmd: cmd[0] == b"MGET")
            assert await lane.call("GET", "k") == b"v"
            assert await lane.call("MGET", "k") == [b"v"]
            assert proxy.count(lambda cmd: cmd[0] in (b"GET", b"MGET")) == 4
            await lane.call("SCRIPT", "FLUSH")
            with pytest.raises(rex.NoScriptError):
                await lane.call("EVALSHA", GUARD_SHA, 0)
            proxy.drop_reply(lambda cmd: cmd[0] == b"EVALSHA")
            with pytest.raises(rex.NoScriptError):  # the resent call's own reply
                await lane.call("EVALSHA", GUARD_SHA, 0)
            assert proxy.count(lambda cmd: cmd[0] == b"EVALSHA") == 3
        finally:
            await lane.aclose()
            await client.aclose()


def _connection(client: Redis) -> Any:
    """A bare connection from the client's pool, as a `Lane` makes them."""
    pool: Any = client.connection_pool
    return pool.make_connection()


async def _client_id(conn: Any) -> int:
    await send(conn, b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
    return int(await conn.read_response())
