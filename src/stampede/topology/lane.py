"""A lean lane of connections to one server, for stampede's batched round trips.

redis-py's `execute_command` wraps every call in pool locking, retry, response
callbacks and observability hooks, which on this hot path cost more than the
round trip itself. A `Lane` keeps its own free list of redis-py `Connection`s
(made by the client's pool, so they share its address, timeouts and retry
settings), sends packed commands, and reads raw replies:

- an error reply of one command (`ResponseError`) comes back as that command's
  result and leaves the connection usable;
- a timeout or connection error drops the connection. What happens next is the
  one retry policy of `retries`: a pipeline of idempotent commands (reads,
  stampede's guarded writes) is sent again on a fresh connection after a
  connection error, up to `retries` times; anything else is never sent again once
  it may have reached the server and raises `OutcomeUnknownError` naming it. A
  failure to connect (nothing sent) is retried for every command;
- a free connection the server closed meanwhile is replaced before anything is
  sent on it;
- at most `limit` connections are open (`ConnectOptions.max_connections`);
  callers beyond wait for a free one;
- an authentication error (`NOAUTH`, `WRONGPASS`) is a refusal, not a lost
  reply: it is raised at once and never retried.

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

from ..errors import OutcomeUnknownError
from .retries import all_idempotent, backoff, describe

__all__ = ["Lane", "Session", "pack", "send"]

LOST = (rex.ConnectionError, rex.TimeoutError, OSError, TimeoutError)
"""What a lost reply raises: the connection dropped or did not answer in time."""


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


def _stale(conn: Any) -> bool:
    """True when a connection cannot be used as it is: closed, or closed by the server."""
    if not conn.is_connected:
        return True
    reader = getattr(conn, "_reader", None)
    writer = getattr(conn, "_writer", None)
    if reader is None or writer is None:
        return False  # not redis-py's asyncio connection: trust is_connected
    return bool(reader.at_eof() or writer.transport.is_closing())


class Lane:
    """Connections to one Redis server, used one round trip at a time each.

    `name` names the server in errors; `retries` is how often a failed connection
    attempt, or an idempotent pipeline whose connection died, is tried again
    (with full-jitter backoff between `retry_base` and `retry_cap` seconds).
    """

    __slots__ = (
        "_base",
        "_cap",
        "_client",
        "_free",
        "_limit",
        "_open",
        "_waiters",
        "name",
        "retries",
    )

    def __init__(
        self,
        client: Redis,
        *,
        limit: int = 64,
        name: str | None = None,
        retries: int = 1,
        retry_base: float = 0.01,
        retry_cap: float = 0.5,
    ) -> None:
        self._client = client
        self._limit = limit
        self._free: list[Any] = []
        self._open = 0
        self._waiters: list[asyncio.Future[None]] = []
        kwargs = client.connection_pool.connection_kwargs
        self.name = name or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        self.retries = retries
        self._base = retry_base
        self._cap = retry_cap

    @property
    def limit(self) -> int:
        """The most connections this lane opens at once (`max_connections`)."""
        return self._limit

    @property
    def open_connections(self) -> int:
        """Connections open (or being opened) now, in use or free."""
        return self._open

    async def _take(self) -> Any:
        while not self._free and self._open >= self._limit:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Woken and cancelled at once (a deadline): pass the wake-up on, or
                # the connection given back would wait for the next release.
                if waiter.done() and not waiter.cancelled():
                    self._wake()
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise
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
        self._wake()

    def _wake(self) -> None:
        """Let the longest waiter try for a connection."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                break

    async def _ready(self) -> Any:
        """A connected connection; connecting is retried (nothing was sent yet)."""
        attempt = 0
        while True:
            conn = await self._take()
            try:
                if _stale(conn):
                    await conn.disconnect(nowait=True)
                    await conn.connect()
                return conn
            except rex.AuthenticationError:
                await self._drop(conn)  # a refusal: trying again cannot help
                raise
            except rex.ConnectionError:
                await self._drop(conn)
                if attempt >= self.retries:
                    raise
                attempt += 1
                await asyncio.sleep(backoff(attempt, self._base, self._cap))
            except BaseException:
                await self._drop(conn)
                raise

    def parse(self, command: Sequence[Any], reply: Any) -> Any:
        """`reply` as redis-py's own call of `command` would return it (its callback)."""
        name = command[0]
        if isinstance(reply, BaseException) or not isinstance(name, str):
            return reply
        callback = self._client.response_callbacks.get(name)
        return reply if callback is None else callback(reply)

    async def call(self, *args: Any) -> Any:
        """One command; its reply (an error reply raises)."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def pipeline(
        self, commands: Sequence[Sequence[Any]], *, resend: bool | None = None
    ) -> list[Any]:
        """Send `commands` at once; one reply or `ResponseError` per command, in order.

        After a lost reply the pipeline is sent again only when every command is
        idempotent (`resend` overrides that judgement for callers who know better);
        else `OutcomeUnknownError`. Timeouts are never retried (a paused server
        would stall the caller): an idempotent pipeline raises redis-py's
        `TimeoutError`, another `OutcomeUnknownError`.
        """
        safe = all_idempotent(commands) if resend is None else resend
        attempt = 0
        while True:
            conn = await self._ready()
            replies: list[Any] = []
            try:
                await send(conn, pack(conn, commands))
                for _ in commands:
                    try:
                        replies.append(await conn.read_response())
                    except rex.ResponseError as exc:
                        replies.append(exc)
            except rex.AuthenticationError:
                # NOAUTH: the server refused the command unrun; not a lost reply.
                await self._drop(conn)
                raise
            except LOST as exc:
                await self._drop(conn)
                if not safe:
                    raise OutcomeUnknownError(
                        describe(commands), shard=self.name, cause=exc
                    ) from exc
                if isinstance(exc, rex.TimeoutError | TimeoutError) or attempt >= self.retries:
                    raise
                attempt += 1
                await asyncio.sleep(backoff(attempt, self._base, self._cap))
                continue
            except BaseException:
                await self._drop(conn)
                raise
            self._give(conn, broken=False)
            return replies

    def session(self) -> Session:
        """One connection for several round trips (WATCH ... EXEC): `async with`."""
        return Session(self)

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


class Session:
    """One lane connection held for several round trips; nothing in it is ever resent.

    Errors propagate as redis-py's (a lost reply as `ConnectionError` or
    `TimeoutError`): the caller knows what the exchange means. The connection goes
    back to the lane when the block ends cleanly, and is closed otherwise (it may
    still hold a WATCH or an open MULTI).
    """

    __slots__ = ("_conn", "_lane", "broken")

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._conn: Any = None
        self.broken = False

    async def __aenter__(self) -> Session:
        self._conn = await self._lane._ready()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        conn, self._conn = self._conn, None
        if exc_type is None and not self.broken:
            self._lane._give(conn, broken=False)
        else:
            await self._lane._drop(conn)

    @property
    def lane(self) -> Lane:
        return self._lane

    async def call(self, *args: Any) -> Any:
        """One command's raw reply; an error reply raises."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Raw replies (error replies as `ResponseError` values), in order."""
        conn = self._conn
        replies: list[Any] = []
        try:
            await send(conn, pack(conn, commands))
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except rex.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            self.broken = True
            raise
        return replies
