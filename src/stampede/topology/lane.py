"""A lean lane of connections to one server, for stampede's batched round trips.

redis-py's `execute_command` wraps every call in pool locking, retry, response
callbacks and observability hooks, which on this hot path cost more than the
round trip itself. A `Lane` keeps its own free list of redis-py `Connection`s
(made by the client's pool, so they share its address, timeouts and retry
settings), sends packed commands, and reads raw replies:

- an error reply of one command (`ResponseError`) comes back as that command's
  result and leaves the connection usable;
- a timeout or connection error drops the connection; a connection error before
  any reply arrived is retried once on a fresh connection (every command sent
  here is idempotent: reads and guarded writes);
- at most `limit` connections are open; callers beyond wait for a free one.

Commands are written straight to the connection's stream (redis-py's own send
path costs a task per call; see `send`) and packed by hiredis's C encoder
(`hiredis.pack_command`), about five times faster than the pure-Python one
redis-py's asyncio connections use; an argument hiredis does not take (or a
command name with a space in it) goes through redis-py's packer, which also gives
redis-py's error for a value it cannot send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hiredis import pack_command as _hiredis_pack
from redis import exceptions as rex
from redis.asyncio import Redis

__all__ = ["Lane", "pack", "send"]


def pack(conn: Any, commands: Sequence[Sequence[Any]]) -> bytes | list[bytes]:
    """The wire bytes of `commands`, by hiredis when it can, else by redis-py."""
    try:
        out = []
        for command in commands:
            name = command[0]
            if (b" " if isinstance(name, bytes) else " ") in name:
                break  # "CONFIG GET"-style names are split by redis-py's packer
            out.append(_hiredis_pack(tuple(command)))
        else:
            return b"".join(out)
    except TypeError:
        pass
    packed: list[bytes] = conn.pack_commands(commands)
    return packed


async def send(conn: Any, data: bytes | list[bytes]) -> None:
    """Write `data` to a connected redis-py connection, as `send_packed_command` would.

    redis-py wraps every send in `asyncio.wait_for`, which on Python 3.11 makes a
    task and so delays the bytes by a loop turn. Here they go to the transport at
    once, and only waiting for a full buffer to drain is under the socket timeout.
    Errors become redis-py's (`TimeoutError`, `ConnectionError`), as there.
    """
    writer = getattr(conn, "_writer", None)
    if writer is None or not conn.is_connected:  # not connected yet (or another redis-py)
        await conn.send_packed_command(data, check_health=False)
        return
    try:
        if isinstance(data, bytes):
            writer.write(data)
        else:
            writer.writelines(data)
        transport = writer.transport
        if transport.get_write_buffer_size() or transport.is_closing():
            async with asyncio.timeout(conn.socket_timeout):
                await writer.drain()
    except TimeoutError:
        await conn.disconnect(nowait=True)
        raise rex.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        await conn.disconnect(nowait=True)
        raise rex.ConnectionError(f"Error while writing to socket: {exc}") from exc


class Lane:
    """Connections to one Redis server, used one round trip at a time each."""

    __slots__ = ("_client", "_free", "_limit", "_open", "_waiters")

    def __init__(self, client: Redis, *, limit: int = 64) -> None:
        self._client = client
        self._limit = limit
        self._free: list[Any] = []
        self._open = 0
        self._waiters: list[asyncio.Future[None]] = []

    async def _take(self) -> Any:
        while not self._free and self._open >= self._limit:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        if self._free:
            return self._free.pop()
        self._open += 1
        pool: Any = self._client.connection_pool
        return pool.make_connection()

    def _give(self, conn: Any, *, broken: bool) -> None:
        if broken:
            self._open -= 1
        else:
            self._free.append(conn)
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break

    async def call(self, *args: Any) -> Any:
        """One command; its reply (an error reply raises)."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send `commands` at once; one reply or `ResponseError` per command, in order."""
        for attempt in (0, 1):
            conn = await self._take()
            replies: list[Any] = []
            try:
                await send(conn, pack(conn, commands))
                for _ in commands:
                    try:
                        replies.append(await conn.read_response())
                    except rex.ResponseError as exc:
                        replies.append(exc)
            except rex.ConnectionError:
                await self._drop(conn)
                if attempt or replies:
                    raise
                continue
            except BaseException:
                await self._drop(conn)
                raise
            self._give(conn, broken=False)
            return replies
        raise AssertionError("unreachable")  # pragma: no cover

    async def _drop(self, conn: Any) -> None:
        try:
            await conn.disconnect()
        finally:
            self._give(conn, broken=True)

    async def aclose(self) -> None:
        free, self._free = self._free, []
        for conn in free:
            self._open -= 1
            await conn.disconnect()
