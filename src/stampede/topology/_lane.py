"""A lane of connections to one server, for stampede's batched round trips.

A `Lane` holds stampede's own connections to one server (`_resp.Connection`) and
runs pipelines on them:

- a pipeline goes on an idle connection among the next 8 (going round them); while
  those are busy, another is opened, up to 8 for pipelines (`_SHARED`, those being
  opened counted; `limit`, `ConnectOptions.max_connections`, in all), and past
  that it queues on the least busy (pipelining: replies come back in order): a
  burst of callers (a cold start, a script cache emptied by a failover) opens 8
  connections, not one per caller. A caller waiting for one being opened connects
  itself once one is lost or refused (an unreachable host: one timeout each);
- an error reply of one command comes back as that command's result;
- a lost connection follows the one retry policy of `retries`: a pipeline of
  idempotent commands (reads, stampede's guarded writes) is sent again on a fresh
  connection, up to `retries` times; anything else is never sent again once it
  may have reached the server and raises `OutcomeUnknownError` naming it. A
  failure to connect (nothing sent) is retried for every command;
- a timeout is never retried (a paused server would stall the caller): an
  idempotent pipeline raises `ReplyTimeout`, another `OutcomeUnknownError`;
- a refusal of the credentials (`NOAUTH`, `WRONGPASS`) raises `AuthError` at once
  and is never retried;
- once a connection was lost (or could not be made), the next one is opened only
  after `check` (when set) has run: Sentinel shards ask the Sentinels there where
  the primary is now, which may `repoint` the lane first;
- once closed (`aclose`), the lane opens no connection until `reopen`: a call still
  in flight then (or after) raises `ClientClosed`, a connection being opened is
  closed, not kept, and a round waiting to connect (`rounds`) ends before it returns.

`session()` holds one connection alone for several round trips (WATCH ... EXEC).
`send_now` and `send_parts` make a pipeline's first attempt without a task; its
`Sent` goes on through `pipeline(commands, first=sent)` by the rules above.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import OutcomeUnknownError
from ._endpoint import Endpoint
from ._resp import ClientClosed, Connection, ConnectionLost, ConnectTimeout, ReplyTimeout, blocking
from ._retries import all_idempotent, backoff, describe, note_loss
from ._sent import Sent
from ._session import Session, check_auth

__all__ = ["LOST", "Lane", "Sent", "Session"]

LOST = (ConnectionLost, ReplyTimeout)
"""What a lost reply raises: the connection dropped, or did not answer in time."""

_BUSY = 2
"""Pipelines waiting on every connection before the lane opens another."""

_LOOK = 8
"""Connections `Lane._pick` looks at, at most, for one pipeline (going round them)."""

_SHARED = 8  # connections a lane opens for pipelines (those being opened count), at most


class Lane:
    """Connections to one Redis server (see the module for the rules).

    `retries` is how often a failed connection attempt, or an idempotent pipeline
    whose connection died, is tried again (with full-jitter backoff between
    `retry_base` and `retry_cap` seconds).
    """

    __slots__ = (
        "_base",
        "_cap",
        "_checked",
        "_exclusive",
        "_limit",
        "_losses",
        "_next",
        "_opening",
        "_pooling",
        "_shared",
        "_waiters",
        "check",
        "closed",
        "corked",
        "endpoint",
        "name",
        "retries",
        "rounds",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        limit: int = 64,
        name: str | None = None,
        retries: int = 1,
        retry_base: float = 0.01,
        retry_cap: float = 0.5,
    ) -> None:
        self.endpoint = endpoint
        self.name = name or endpoint.name
        self.retries = retries
        self._limit = limit
        self._base = retry_base
        self._cap = retry_cap
        self._shared: list[Connection] = []
        self._exclusive: list[Connection] = []  # held by sessions
        self._opening = 0
        self._pooling = 0  # of those, being opened for pipelines (`connection`)
        self._next = 0  # where `_pick` starts looking next
        self._waiters: list[asyncio.Future[None]] = []
        self.check: Callable[[], Awaitable[object]] | None = None  # (after a loss: module)
        self._losses = 0  # connections lost or refused so far
        self._checked = 0  # of those, how many a finished `check` came after
        self.corked: Any = None  # this loop turn's round pipelines (`_rounds._Cork`)
        self.rounds: set[asyncio.Task[None]] = set()  # corked turns waiting to connect
        self.closed = False  # `aclose`d, and not `reopen`ed since

    @property
    def limit(self) -> int:
        """The most connections this lane opens at once (`max_connections`)."""
        return self._limit

    @property
    def open_connections(self) -> int:
        """Connections open (or being opened) now, in use or idle."""
        return len(self._shared) + len(self._exclusive) + self._opening

    # -- connections --------------------------------------------------------------

    def _lost(self) -> None:
        """A connection to this server was lost or refused: `check` before the next
        (and whoever waits for one being opened connects itself: `connection`)."""
        self._losses += 1
        self._wake(every=True)

    async def _connect(self, *, pooled: bool = False) -> Connection:
        """A new connection; connecting is retried with backoff (nothing was sent).
        After a loss, `check` runs first; a connection opened to the server this lane
        was `repoint`ed away from meanwhile is closed, and another opened."""
        attempt = 0
        while True:
            self._refuse_if_closed()
            losses = self._losses
            if losses != self._checked and self.check is not None:
                await self.check()
                self._checked = max(self._checked, losses)
                self._refuse_if_closed()
            endpoint = self.endpoint
            self._opening += 1
            self._pooling += pooled
            try:
                conn = await Connection.open(endpoint)
            except ConnectTimeout:
                self._lost()
                raise  # a host that does not answer: trying again only waits longer
            except ConnectionLost:
                self._lost()
                if attempt >= self.retries:
                    raise
            else:
                if self.closed:  # closed while this one was being opened
                    conn.close()
                    self._refuse_if_closed()
                if endpoint is self.endpoint:
                    return conn
                conn.close()
                continue
            finally:
                self._opening -= 1
                self._pooling -= pooled
            attempt += 1
            await asyncio.sleep(backoff(attempt, self._base, self._cap))

    def _refuse_if_closed(self) -> None:
        if self.closed:
            raise ClientClosed(
                "the client was closed (aclose), nothing was sent: open it again (await "
                "st.open(), or async with) before using it"
            )

    def _pick(self) -> Connection | None:
        """The connection for the next pipeline if one is at hand, else None (see the module)."""
        shared = self._shared
        count = len(shared)
        if count == 0:
            return None
        start = self._next % count
        best: Connection | None = None
        gone: list[Connection] = []
        for step in range(min(count, _LOOK)):
            conn = shared[(start + step) % count]
            if not conn.usable:
                gone.append(conn)
                continue
            pending = conn.pending
            if pending == 0:
                best = conn
                self._next = start + step + 1
                break
            if best is None or pending < best.pending:
                best = conn
        else:
            self._next = start + min(count, _LOOK)
        for conn in gone:
            shared.remove(conn)
            self._lost()
        full = count + self._pooling >= _SHARED or self.open_connections >= self._limit
        if best is not None and (best.pending < _BUSY or full):
            return best
        return None

    async def connection(self) -> Connection:
        """A shared connection for the next pipeline (see the module): an idle one, a new
        one while under `_SHARED` and the limit (opened as `_connect` does), else the
        least busy, or one being opened (once one was lost or refused: its own)."""
        losses = self._losses
        while True:
            conn = self._pick()  # (at the limit: the least busy, if any is not held)
            if conn is not None:
                return conn
            if self.open_connections < self._limit and (
                self._pooling < _SHARED or self._losses != losses
            ):
                conn = await self._connect(pooled=True)
                self._shared.append(conn)
                self._wake(every=True)  # those waiting for one being opened
                return conn
            await self._released()  # one held by a session comes back, or one is opened

    async def _released(self) -> None:
        """Wait until a held connection comes back (or a moment passes: one may close)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait([waiter], timeout=0.05)
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    # -- pipelines ----------------------------------------------------------------

    async def call(self, *args: Any) -> Any:
        """One command; its reply (an error reply raises)."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def send_now(self, commands: Sequence[Sequence[Any]], then: Callable[[Sent], None]) -> bool:
        """The first attempt of `pipeline(commands)`, now, when a shared connection is
        at hand and nothing in them blocks (WAIT); else False, nothing sent. `then(sent)`
        runs once, when it ends; `TypeError` (nothing sent) for an unsendable argument.
        A caller that cannot use the `Sent` as it is (a lost reply, an error reply)
        passes it to `pipeline(commands, first=sent)`, which takes it as its first
        attempt: nothing is sent again that `pipeline` would not send again."""
        return not blocking(commands) and self.send_parts([(commands, then)])

    def send_parts(
        self,
        parts: Sequence[tuple[Sequence[Sequence[Any]], Callable[[Sent], None]]],
        conn: Connection | None = None,
    ) -> bool:
        """`send_now` of several pipelines (none blocking) in one write, on `conn` (by
        default one at hand; False, nothing sent, when none is): each `then` gets its own
        pipeline's `Sent`, kept if answered before the connection ends."""
        conn = self._pick() if conn is None else conn
        if conn is None:
            return False
        conn.send_parts([(commands, Sent(commands, conn, then)) for commands, then in parts])
        return True

    async def pipeline(
        self,
        commands: Sequence[Sequence[Any]],
        *,
        resend: bool | None = None,
        first: Sent | None = None,
    ) -> list[Any]:
        """Send `commands` at once; one reply or `ReplyError` per command, in order.

        Resent after a lost reply only when every command is idempotent (or `resend`
        says so), else `OutcomeUnknownError`; timeouts never. `WAIT`, `WAITAOF` go on a
        connection of their own (nothing queues behind them). `first`: a `send_now`
        attempt of these commands that has ended, taken as the first (once)."""
        safe = all_idempotent(commands) if resend is None else resend
        blocks = blocking(commands)
        attempt = 0
        result: list[Any] | BaseException
        while True:
            if first is not None and first.fresh:
                first.fresh = False
                conn, result = first.conn, first.result
            else:
                conn = await (self.hold() if blocks else self.connection())
                try:
                    result = await (
                        self._alone(conn, commands, blocks)
                        if blocks
                        else conn.send(commands, blocks=0)
                    )
                except LOST as exc:
                    result = exc
            if isinstance(result, BaseException):
                if not isinstance(result, LOST):
                    raise result
                self._lost()
                note_loss()
                if not safe:
                    raise OutcomeUnknownError(
                        describe(commands), shard=self.name, cause=result
                    ) from result
                if isinstance(result, ReplyTimeout) or attempt >= self.retries:
                    raise result
                attempt += 1
                await asyncio.sleep(backoff(attempt, self._base, self._cap))
                continue
            check_auth(conn, result)
            return result

    async def _alone(
        self, conn: Connection, commands: Sequence[Sequence[Any]], blocks: float
    ) -> list[Any]:
        """`commands` on the held connection `conn`, which then goes back to the lane
        (closed unless every reply came)."""
        broken = True
        try:
            replies = await conn.send(commands, blocks=blocks)
            broken = False
        finally:
            self.release(conn, broken=broken)
        return replies

    def session(self) -> Session:
        """One connection for several round trips (WATCH ... EXEC): `async with`."""
        return Session(self)

    async def hold(self) -> Connection:
        """A connection of its own, for a session (`release` it after)."""
        for conn in self._shared:
            if conn.usable and conn.pending == 0:
                self._shared.remove(conn)
                self._exclusive.append(conn)
                return conn
        while self.open_connections >= self._limit:
            idle = next((c for c in self._shared if c.usable and c.pending == 0), None)
            if idle is not None:
                self._shared.remove(idle)
                self._exclusive.append(idle)
                return idle
            await self._released()
        conn = await self._connect()
        self._exclusive.append(conn)
        return conn

    def release(self, conn: Connection, *, broken: bool) -> None:
        """A held connection back: to the shared ones, or closed when `broken`."""
        if conn in self._exclusive:
            self._exclusive.remove(conn)
        if not conn.usable:
            self._lost()
        if broken or not conn.usable or conn.pending or conn.endpoint is not self.endpoint:
            conn.close()
        else:
            self._shared.append(conn)
        self._wake(every=False)

    def _wake(self, *, every: bool) -> None:  # those waiting in `_released`: one, or all
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                if not every:
                    break

    def repoint(self, endpoint: Endpoint) -> None:
        """Talk to another server from now on (a Sentinel failover moved the primary):
        the connections to the old one are closed, those held by sessions too (what
        waits on them fails as a lost connection, and follows the retry policy); none
        is reused, nor one still being opened to the old server."""
        self.endpoint = endpoint
        conns, self._shared = self._shared, []
        held, self._exclusive = self._exclusive, []
        for conn in [*conns, *held]:
            conn.close()

    def reopen(self) -> None:
        self.closed = False  # connect again when asked (after `aclose`)

    async def aclose(self) -> None:
        """Close every connection; until `reopen`, open none (see the module)."""
        self.closed = True
        conns, self._shared = self._shared, []
        held, self._exclusive = self._exclusive, []
        for conn in [*conns, *held]:
            conn.close()
        for task in self.rounds:  # nothing sent yet: each of its callers hears ClientClosed
            task.cancel()
        await asyncio.gather(*self.rounds, return_exceptions=True)
