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

A coalescer given a `Quick` sends a batch without a task when it can: `start`
writes the batch's round trip at once (when a connection is at hand) and the
answer is decoded (`finish`) and delivered from the connection's own callback.
Anything `finish` will not take as it is (a lost reply, an error reply, a
redirection) goes to `resume`, in a task, which carries on from that answer as
the batch function would have (its retry rules included: nothing is sent again
that the batch function would not send again). Without a `Quick`, or when
`start` cannot send, the batch runs in a task (`run_batch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from operator import itemgetter
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Coalescer", "Fanin", "Quick", "Sink"]

Req = TypeVar("Req")
Res = TypeVar("Res")

RunBatch = Callable[[list[Req]], Awaitable[list[Res | BaseException]]]


class Quick(Protocol[Req, Res]):
    """A batch's round trip without a task (see the module)."""

    def start(self, requests: list[Req], then: Callable[[Any], None]) -> bool:
        """Send the batch's round trip now, `then(answer)` once it ends; False (nothing
        sent) when that is not possible now."""
        ...

    def finish(self, requests: list[Req], answer: Any) -> list[Res | BaseException] | None:
        """Each request's result from `answer`; None when it needs `resume`."""
        ...

    async def resume(self, requests: list[Req], answer: Any) -> list[Res | BaseException]:
        """The batch function, carrying on from `answer` (its first attempt)."""
        ...


class Sink(Protocol):
    """Where a queued request's result (or exception) goes: `deliver(index, result)`."""

    def deliver(self, index: int, result: Any) -> None: ...


class Fanin:
    """One caller's answers from several coalescers, in one future.

    `future` resolves with the list of results (an exception in the place of a
    part that failed) once every part has been delivered; `owed()` names the
    parts still waited for (of a caller that gave up, the ones never delivered).
    A fanin made with `keep` (a write's) goes on taking its parts' answers after
    its caller gave up (`future` cancelled): `rest()` waits for the last of them,
    so a cancelled write still learns what its calls did (`_plan.write_parts`).
    """

    __slots__ = ("_keep", "_late", "_left", "future", "results")

    def __init__(self, count: int, keep: bool = False) -> None:
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.results: list[Any] = [_OWED] * count
        self._left = count
        self._keep = keep
        self._late: asyncio.Future[list[Any]] | None = None

    def deliver(self, index: int, result: Any) -> None:
        future = self.future
        if future.done():  # the caller gave up; the request went anyway
            if self._keep and self.results[index] is _OWED:
                self.results[index] = result
                self._left -= 1
                late = self._late
                if self._left == 0 and late is not None and not late.done():
                    late.set_result(self.results)
            return
        self.results[index] = result
        self._left -= 1
        if self._left == 0:
            future.set_result(self.results)

    def owed(self) -> list[int]:
        """The indexes of the parts not delivered."""
        return [i for i, result in enumerate(self.results) if result is _OWED]

    async def rest(self) -> list[Any]:
        """Every part's result, once the last is in: after the caller gave up too (with
        `keep`)."""
        if self._left == 0:
            return self.results
        if not self.future.done():
            return await self.future
        if self._late is None:
            self._late = asyncio.get_running_loop().create_future()
        return await self._late


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
_REQUEST = itemgetter(0)
"""An `Entry`'s request."""

MAX_IN_FLIGHT = 2


class Coalescer(Generic[Req, Res]):
    """Gathers requests of one loop turn into batches of at most `max_items` items."""

    __slots__ = (
        "_closing",
        "_inline",
        "_items",
        "_lone",
        "_queue",
        "_quick",
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
        quick: Quick[Req, Res] | None = None,
    ) -> None:
        self._run = run_batch
        self._quick = quick
        self._size = size
        self.max_items = max_items
        self._queue: list[Entry] = []
        self._items = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._inline = 0
        self._lone = 0  # batches sent by `quick.start`, not answered yet
        self._closing: asyncio.Future[None] | None = None

    @property
    def idle(self) -> bool:
        """Nothing queued and no round trip in flight."""
        return not (self._tasks or self._queue or self._inline or self._lone)

    async def call(self, request: Req) -> Res:
        """`request`'s result: run in the caller's own task when idle, else batched.

        An idle coalescer has nothing for the request to ride with, so the caller
        makes the round trip itself: no task, no loop turn in between (with a
        `Quick`, its answer comes back through a future instead of the batch
        function's awaits). Requests submitted meanwhile queue and go in the next
        loop turn as usual.
        """
        if self._quick is not None or not self.idle:
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

    def add(self, request: Req, sink: Sink, index: int, size: int | None = None) -> None:
        """Queue `request`; its result goes to `sink.deliver(index, result)`. `size`: its
        items when the caller knows them (else `size(request)`)."""
        if not (self._tasks or self._queue or self._inline or self._lone):  # idle, inline
            # Idle: nothing in flight that later requests of this turn could wait
            # behind, so this one goes at once rather than one loop turn later.
            self._start([(request, sink, index)])
            return
        if size is None:
            size = self._size(request)
        if self._queue and self._items + size > self.max_items:
            self._flush()  # a request is never split across batches
        self._queue.append((request, sink, index))
        self._items += size
        if self._items >= self.max_items:
            self._flush()
        elif not self._scheduled and len(self._tasks) + self._lone < MAX_IN_FLIGHT:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._queue:
            return
        batch, self._queue, self._items = self._queue, [], 0
        self._start(batch)

    def _start(self, batch: list[Entry]) -> None:
        quick = self._quick
        if quick is not None:
            requests = list(map(_REQUEST, batch))
            self._lone += 1  # before `start`: its answer may not come before it returns
            try:
                sent = quick.start(requests, partial(self._answered, batch, requests))
            except Exception:
                sent = False  # the batch function meets it again, and reports it
            if sent:
                return
            self._lone -= 1
        self._spawn(self._send(batch, self._run))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _answered(self, batch: list[Entry], requests: list[Any], answer: Any) -> None:
        """A `Quick` batch's answer: its results to the callers, or `resume` in a task."""
        assert self._quick is not None
        try:
            results = self._quick.finish(requests, answer)
        except Exception:
            results = None  # `resume` meets it again, and reports it
        if results is None:
            self._spawn(self._send(batch, partial(self._quick.resume, answer=answer)))
        self._lone -= 1
        if results is not None:
            for (_, sink, index), result in zip(batch, results, strict=True):
                sink.deliver(index, result)
        if self._queue or self._closing is not None:  # else `_next` has nothing to do
            self._next()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._next()

    def _next(self) -> None:
        """A batch came back: the queue goes when it may; `aclose` hears when all did."""
        if self._queue and not self._scheduled and len(self._tasks) + self._lone < MAX_IN_FLIGHT:
            self._flush()
        closing = self._closing
        if closing is not None and not closing.done() and not (self._lone or self._tasks):
            closing.set_result(None)

    async def _send(self, batch: list[Entry], run: RunBatch[Any, Any]) -> None:
        try:
            results = await run([request for request, _, _ in batch])
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
        while self._lone or self._tasks:
            if self._lone:
                if self._closing is None or self._closing.done():
                    self._closing = asyncio.get_running_loop().create_future()
                await asyncio.shield(self._closing)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
                # (their `_done` may not have run yet, and from Python 3.12 a gather of
                # finished tasks returns without a loop turn: this loop never ended)
                self._tasks.difference_update([t for t in self._tasks if t.done()])
