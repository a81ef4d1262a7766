"""stampede's own Redis connection: RESP2 over an asyncio protocol, parsed by hiredis.

One `Connection` carries many pipelines at once (pipelining): `send(commands)`
writes a pipeline's packed commands at once and returns one future that resolves
with its replies, in order, when the last one has arrived. Replies are matched to
pipelines strictly in the order they were sent, so:

- a pipeline whose caller gave up (cancelled) still has its replies read and
  dropped, never handed to the next pipeline;
- a timeout (no reply within `socket_timeout`) or a lost connection ends the
  connection and fails every pipeline still waiting on it: after either, the
  replies would no longer line up. A timeout fails the pipelines with
  `ReplyTimeout`, a drop with `ConnectionLost`. Each pipeline carries its own
  deadline, and a connection keeps one loop timer, at the earliest deadline it has
  seen (not one per pipeline, armed and cancelled per round trip): when it fires,
  a pipeline past its deadline ends the connection, else it is armed again at the
  earliest deadline still pending;
- an error reply of one command (`ReplyError` and its kinds: `NoScriptError`,
  `MovedError`, `AskError`, ...) comes back as that command's result, not raised,
  and leaves the connection usable.

`send_then(commands, callback)` is `send` without the future: the callback gets the
replies (or the error that ended the connection) as soon as they are read, inside
the protocol's own callback, with no trip through the event loop's ready queue.
`send_parts` writes several such pipelines at once, each answered on its own.

RESP2 is all stampede needs (strings, integers, arrays, nil). At connect it
authenticates (`AUTH`, ACL user or password alone), selects the database and sets
the client name in one round trip; TLS is the transport's (`ssl.SSLContext`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

import hiredis

from ._encode import blocking as blocking
from ._encode import pack as pack
from ._endpoint import Endpoint
from ._reply_errors import PLAIN as _PLAIN
from ._reply_errors import AskError as AskError
from ._reply_errors import AuthError as AuthError
from ._reply_errors import BusyLoadingError as BusyLoadingError
from ._reply_errors import ClientClosed as ClientClosed
from ._reply_errors import ClusterDownError as ClusterDownError
from ._reply_errors import ConnectionLost as ConnectionLost
from ._reply_errors import ConnectTimeout as ConnectTimeout
from ._reply_errors import MasterDownError as MasterDownError
from ._reply_errors import MovedError as MovedError
from ._reply_errors import NoPermissionError as NoPermissionError
from ._reply_errors import NoScriptError as NoScriptError
from ._reply_errors import ReadOnlyError as ReadOnlyError
from ._reply_errors import RedisError as RedisError
from ._reply_errors import ReplyError as ReplyError
from ._reply_errors import ReplyTimeout as ReplyTimeout
from ._reply_errors import TryAgainError as TryAgainError
from ._reply_errors import is_auth_refusal as is_auth_refusal
from ._reply_errors import kind_of as _kind_of
from ._reply_errors import kinds_in as _kinds_in

__all__ = [
    "AskError",
    "AuthError",
    "BusyLoadingError",
    "ClientClosed",
    "ClusterDownError",
    "ConnectTimeout",
    "Connection",
    "ConnectionLost",
    "MasterDownError",
    "MovedError",
    "NoPermissionError",
    "NoScriptError",
    "ReadOnlyError",
    "RedisError",
    "ReplyError",
    "ReplyTimeout",
    "TryAgainError",
    "blocking",
    "pack",
]


Callback = Callable[[Any], None]
"""Gets a pipeline's replies (a list), or the `RedisError` that ended its connection."""


class _Waiting:
    """One pipeline waiting for its replies: a future, or a callback, to hand them to."""

    __slots__ = ("callback", "count", "deadline", "ends", "future", "replies")

    def __init__(
        self,
        future: asyncio.Future[list[Any]] | None,
        callback: Callback | None,
        count: int,
        deadline: float | None,
    ) -> None:
        self.future = future
        self.callback = callback
        self.count = count
        self.deadline = deadline
        self.replies: list[Any] = []
        self.ends = True
        """The last pipeline of its write (`Connection.pending` counts writes)."""


class Connection(asyncio.Protocol):
    """One connection to one server; pipelines share it in order (see the module)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._loop = asyncio.get_running_loop()
        self._reader = hiredis.Reader(replyError=ReplyError)
        self._waiting: deque[_Waiting] = deque()
        self._transport: asyncio.Transport | None = None
        self._closed: RedisError | None = None
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._writes = 0  # writes not yet answered in full

    # -- opening ----------------------------------------------------------------

    @classmethod
    async def open(cls, endpoint: Endpoint) -> Connection:
        """A connected, authenticated connection; `ConnectionLost` (nothing sent) or
        `AuthError` when the server cannot be used."""
        loop = asyncio.get_running_loop()
        conn = cls(endpoint)
        try:
            async with asyncio.timeout(endpoint.connect_timeout):
                if endpoint.path is not None:
                    await loop.create_unix_connection(lambda: conn, endpoint.path)
                else:
                    await loop.create_connection(
                        lambda: conn,
                        endpoint.host,
                        endpoint.port,
                        ssl=endpoint.tls,
                        server_hostname=endpoint.host if endpoint.tls is not None else None,
                    )
        except TimeoutError:
            conn.close()
            raise ConnectTimeout(
                f"connecting to {endpoint.name} timed out after {endpoint.connect_timeout} s"
            ) from None
        except OSError as exc:
            conn.close()
            raise ConnectionLost(f"connecting to {endpoint.name} failed: {exc}") from exc
        except BaseException:  # cancelled: no socket is left behind
            conn.close()
            raise
        try:
            await conn._hello()
        except BaseException:  # refused, or cancelled: closed at once (not left open
            conn.close()  # until the hello's timeout)
            raise
        return conn

    async def _hello(self) -> None:
        """AUTH, SELECT and CLIENT SETNAME in one round trip, as needed."""
        ep = self.endpoint
        commands: list[tuple[Any, ...]] = []
        if ep.password is not None:
            commands.append(
                ("AUTH", ep.username, ep.password) if ep.username else ("AUTH", ep.password)
            )
        if ep.db:
            commands.append(("SELECT", ep.db))
        if ep.client_name:
            commands.append(("CLIENT", "SETNAME", ep.client_name))
        if not commands:
            return
        try:  # (whatever it raises, `open` closes the connection)
            replies = await self.send(commands, timeout=ep.connect_timeout)
        except ReplyTimeout as exc:
            raise ConnectTimeout(f"{ep.name} did not answer the hello in time") from exc
        for reply in replies:
            if is_auth_refusal(reply):
                raise AuthError(str(reply))
            if isinstance(reply, ReplyError):
                raise reply

    # -- sending ----------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """True while the connection can take another pipeline."""
        transport = self._transport
        return self._closed is None and transport is not None and not transport.is_closing()

    @property
    def pending(self) -> int:
        """Writes (pipelines, or `send_parts` groups) not yet answered in full."""
        return self._writes

    def send(
        self,
        commands: Sequence[Sequence[Any]],
        *,
        timeout: float | None = None,
        blocks: float | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Write `commands` now; a future of their replies (error replies as values).

        The future fails with `ConnectionLost` or `ReplyTimeout` when the
        connection ends before the last reply; `TypeError` (before anything is
        written) for an argument that cannot be sent. The timeout grows by `blocks`
        (default: `blocking(commands)`, for a caller that has not counted it).
        """
        data = pack(commands)
        future: asyncio.Future[list[Any]] = self._loop.create_future()
        if self._closed is not None or self._transport is None:
            future.set_exception(self._closed or ConnectionLost("not connected"))
            return future
        deadline = self._deadline(commands, timeout, blocks)
        self._write(data, deadline, _Waiting(future, None, len(commands), deadline))
        return future

    def send_then(self, commands: Sequence[Sequence[Any]], callback: Callback) -> None:
        """Write `commands` (none the server holds on purpose, `blocking`: `Lane.send_now`
        sends no WAIT) now, on a `usable` connection; `callback` gets their replies,
        or the `ConnectionLost` / `ReplyTimeout` that ended the connection first,
        exactly once, from inside the protocol (it must not raise).

        `TypeError` (nothing written) for an argument that cannot be sent;
        `ConnectionLost` (nothing written) when the connection is closed.
        """
        self.send_parts([(commands, callback)])

    def send_parts(self, parts: Sequence[tuple[Sequence[Sequence[Any]], Callback]]) -> None:
        """`send_then` of several pipelines in one write: each callback gets its own
        pipeline's replies, so a pipeline answered before the connection ends keeps
        its replies (only those still waiting fail)."""
        data = b"".join([pack(commands) for commands, _ in parts])
        if self._closed is not None or self._transport is None:
            raise self._closed or ConnectionLost("not connected")
        deadline = self._deadline((), None, 0)
        last: _Waiting | None = None
        for commands, callback in parts:
            waiting = _Waiting(None, callback, len(commands), deadline)
            if commands:
                self._waiting.append(last := waiting)
                waiting.ends = False
            else:  # nothing to answer: done at once (a reply would never be its own)
                self._call_back(waiting, [])
        if last is not None:
            last.ends = True
            self._writes += 1
        self._write(data, deadline)

    def _deadline(
        self, commands: Sequence[Sequence[Any]], timeout: float | None, blocks: float | None
    ) -> float | None:
        """When a pipeline's last reply is due (None: no timeout)."""
        wait = self.endpoint.socket_timeout if timeout is None else timeout
        if not wait:
            return None
        wait += blocking(commands) if blocks is None else blocks
        return self._loop.time() + wait

    def _write(self, data: bytes, deadline: float | None, waiting: _Waiting | None = None) -> None:
        if deadline is not None and (self._timer is None or deadline < self._timer_at):
            self._arm(deadline)
        if waiting is not None:
            self._waiting.append(waiting)
            self._writes += 1
        assert self._transport is not None
        self._transport.write(data)

    def _arm(self, when: float) -> None:
        """The connection's one timer, at `when`."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._check_deadlines)
        self._timer_at = when

    def _check_deadlines(self) -> None:
        """The timer fired: a pipeline past its deadline ends the connection; else the
        timer goes again at the earliest deadline pending (none: it rests)."""
        self._timer = None
        now = self._loop.time()
        earliest: float | None = None
        for waiting in self._waiting:
            deadline = waiting.deadline
            if deadline is None:
                continue
            if deadline <= now:
                self._timed_out(waiting)
                return
            if earliest is None or deadline < earliest:
                earliest = deadline
        if earliest is not None:
            self._arm(earliest)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._paused:
            if self._drained is None or self._drained.done():
                self._drained = self._loop.create_future()
            await self._drained

    def close(self) -> None:
        """End the connection; pipelines still waiting fail with `ConnectionLost`."""
        self._fail(ConnectionLost(f"the connection to {self.endpoint.name} was closed"))
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (a stream transport: not always an `asyncio.Transport` instance; uvloop's
        # `TCPTransport` is not, and an isinstance check refused every connection there)
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiting = self._waiting
        while True:
            reply = reader.gets()
            if reply is False:
                return
            if not waiting:  # a reply nobody asked for: the stream is out of step
                self._broken(ConnectionLost(f"{self.endpoint.name} sent an unexpected reply"))
                return
            head = waiting[0]
            if isinstance(reply, ReplyError):
                reply = _kind_of(reply)
            elif isinstance(reply, list) and not _PLAIN.issuperset(map(type, reply)):
                reply = _kinds_in(reply)  # (a plain array, the common case, as it is)
            head.replies.append(reply)
            if len(head.replies) == head.count:
                waiting.popleft()
                self._writes -= head.ends
                future = head.future
                if future is None:
                    self._call_back(head, head.replies)
                elif not future.done():  # a cancelled caller's replies are dropped
                    future.set_result(head.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {exc}" if exc is not None else ""
        self._fail(ConnectionLost(f"the connection to {self.endpoint.name} was lost{why}"))
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- failing ----------------------------------------------------------------

    def _timed_out(self, waiting: _Waiting) -> None:
        """No reply in time: the connection ends (later replies would not line up)."""
        seconds = self.endpoint.socket_timeout
        self._broken(ReplyTimeout(f"{self.endpoint.name} did not answer within {seconds} s"))

    def _broken(self, error: RedisError) -> None:
        self._fail(error)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, error: RedisError) -> None:
        if self._closed is None:
            self._closed = error
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._writes = 0
        while self._waiting:
            waiting = self._waiting.popleft()
            future = waiting.future
            if future is None:
                self._call_back(waiting, error)
            elif not future.done():
                future.set_exception(error)

    def _call_back(self, waiting: _Waiting, result: Any) -> None:
        """Hand `result` to a `send_then` callback; one that raises is reported to the
        loop's exception handler, and the connection goes on."""
        assert waiting.callback is not None
        try:
            waiting.callback(result)
        except Exception as exc:  # a bug in the callback: the stream is still in step
            self._loop.call_exception_handler(
                {"message": "a send_then callback raised", "exception": exc, "protocol": self}
            )
