"""The lean connection lane: its own send path keeps redis-py's error semantics."""

from __future__ import annotations

from typing import Any

import pytest
from redis import exceptions as rex
from redis.asyncio import Redis

from stampede.testing import LocalPrimaries
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


def _connection(client: Redis) -> Any:
    """A bare connection from the client's pool, as a `Lane` makes them."""
    pool: Any = client.connection_pool
    return pool.make_connection()


async def _client_id(conn: Any) -> int:
    await send(conn, b"*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")
    return int(await conn.read_response())
