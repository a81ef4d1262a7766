"""Coalescing: requests issued in the same event-loop turn share one round trip.

Each shard (each cluster node) has a `Coalescer` per kind of request. `add`
queues a request and schedules a flush for the next loop turn (or at once when
the batch is full, or when nothing is queued or in flight), so a lone request
goes at once and concurrent ones ride together: one MGET, or one guarded-script
call, per shard for all of them. Results and errors go back to each caller
separately: `run_batch` returns one result or exception per request, and only
an error of the whole round trip (the connection failed) reaches every caller
of that batch.

A caller whose keys live on several shards waits on one `Fanin`: one future,
counted down as each shard's batch answers, so a read costs one wake-up however
many shards it spans (no future, callback or gather per shard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Coalescer", "Fanin", "Sink"]

Req = TypeVar("Req")
Res = TypeVar("Res")

RunBatch = Callable[[list[Req]], Awaitable[list[Res | BaseException]]]


class Sink(Protocol):
    """Where a queued request's result (or exception) goes: `deliver(index, result)`."""

    def deliver(self, index: int, result: Any) -> None: ...


class Fanin:
    """One caller's answers from several coalescers, in one future.

    `future` resolves with the list of results (an exception in the place of a
    part that failed) once every part has been delivered; `owed()` names the
    parts still waited for (of a caller that gave up, the ones never delivered).
    """

    __slots__ = ("_left", "future", "results")

    def __init__(self, count: int) -> None:
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.results: list[Any] = [_OWED] * count
        self._left = count

    def deliver(self, index: int, result: Any) -> None:
        future = self.future
        if future.done():  # the caller gave up; the request went anyway
            return
        self.results[index] = result
        self._left -= 1
        if self._left == 0:
            future.set_result(self.results)

    def owed(self) -> list[int]:
        """The indexes of the parts not delivered."""
        return [i for i, result in enumerate(self.results) if result is _OWED]


_OWED: Any = object()


class _One:
    """A `Sink` of one request: its future gets the result, or raises its exception."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future

    def deliver(self, index: int, result: Any) -> None:
        if self.future.done():
            return
        if isinstance(result, asyncio.CancelledError):
            self.future.cancel()
        elif isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)


Entry = tuple[Any, Sink, int]

MAX_IN_FLIGHT = 2


class Coalescer(Generic[Req, Res]):
    """Gathers requests of one loop turn into batches of at most `max_items` items."""

    __slots__ = (
        "_inline",
        "_items",
        "_queue",
        "_run",
        "_scheduled",
        "_size",
        "_tasks",
        "max_items",
    )

    def __init__(
        self,
        run_batch: RunBatch[Req, Res],
        *,
        max_items: int = 1024,
        size: Callable[[Req], int] = lambda _: 1,
    ) -> None:
        self._run = run_batch
        self._size = size
        self.max_items = max_items
        self._queue: list[Entry] = []
        self._items = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._inline = 0

    @property
    def idle(self) -> bool:
        """Nothing queued and no round trip in flight."""
        return not self._tasks and not self._queue and not self._inline

    async def call(self, request: Req) -> Res:
        """`request`'s result: run in the caller's own task when idle, else batched.

        An idle coalescer has nothing for the request to ride with, so the caller
        makes the round trip itself: no task, no future, no loop turn in between.
        Requests submitted meanwhile queue and go in the next loop turn as usual.
        """
        if not self.idle:
            return await self.submit(request)
        self._inline += 1
        try:
            (result,) = await self._run([request])
        finally:
            self._inline -= 1
        if isinstance(result, BaseException):
            raise result
        return result

    def submit(self, request: Req) -> asyncio.Future[Res]:
        """Queue `request`; the future resolves with its own result or error."""
        future: asyncio.Future[Res] = asyncio.get_running_loop().create_future()
        self.add(request, _One(future), 0)
        return future

    def add(self, request: Req, sink: Sink, index: int) -> None:
        """Queue `request`; its result goes to `sink.deliver(index, result)`."""
        size = self._size(request)
        if self.idle:
            # Idle: nothing in flight that later requests of this turn could wait
            # behind, so this one goes at once rather than one loop turn later.
            self._start([(request, sink, index)])
            return
        if self._queue and self._items + size > self.max_items:
            self._flush()  # a request is never split across batches
        self._queue.append((request, sink, index))
        self._items += size
        if self._items >= self.max_items:
            self._flush()
        elif not self._scheduled and len(self._tasks) < MAX_IN_FLIGHT:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._queue:
            return
        batch, self._queue, self._items = self._queue, [], 0
        self._start(batch)

    def _start(self, batch: list[Entry]) -> None:
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if len(self._tasks) < MAX_IN_FLIGHT and self._queue and not self._scheduled:
            self._flush()

    async def _send(self, batch: list[Entry]) -> None:
        try:
            results = await self._run([request for request, _, _ in batch])
        except BaseException as exc:  # the round trip failed: every caller hears of it
            cancelled = isinstance(exc, asyncio.CancelledError)
            for _, sink, index in batch:
                sink.deliver(index, asyncio.CancelledError() if cancelled else exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
            return
        for (_, sink, index), result in zip(batch, results, strict=True):
            sink.deliver(index, result)

    async def aclose(self) -> None:
        """Wait for batches in flight (their callers are waiting on them anyway)."""
        self._flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
