"""Coalescing: requests issued in the same event-loop turn share one round trip.

Each shard (each cluster node) has a `Coalescer` per kind of request. `submit`
queues a request and schedules a flush for the next loop turn (or at once when
the batch is full), so a lone request waits one loop iteration and concurrent
ones ride together: one MGET, or one guarded-script call, per shard for all of
them. Results and errors go back to each caller separately: `run_batch` returns
one result or exception per request, and only an error of the whole round trip
(the connection failed) reaches every caller of that batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

Req = TypeVar("Req")
Res = TypeVar("Res")

RunBatch = Callable[[list[Req]], Awaitable[list[Res | BaseException]]]


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
        self._queue: list[tuple[Req, asyncio.Future[Res]]] = []
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
        loop = asyncio.get_running_loop()
        size = self._size(request)
        if self.idle:
            # Idle: nothing in flight that later requests of this turn could wait
            # behind, so this one goes at once rather than one loop turn later.
            future: asyncio.Future[Res] = loop.create_future()
            self._start(loop, [(request, future)])
            return future
        if self._queue and self._items + size > self.max_items:
            self._flush()  # a request is never split across batches
        future = loop.create_future()
        self._queue.append((request, future))
        self._items += size
        if self._items >= self.max_items:
            self._flush()
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        if not self._queue:
            return
        batch, self._queue, self._items = self._queue, [], 0
        self._start(asyncio.get_running_loop(), batch)

    def _start(
        self, loop: asyncio.AbstractEventLoop, batch: list[tuple[Req, asyncio.Future[Res]]]
    ) -> None:
        task = loop.create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[Req, asyncio.Future[Res]]]) -> None:
        try:
            results = await self._run([request for request, _ in batch])
        except BaseException as exc:  # the round trip failed: every caller hears of it
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
            return
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # the caller was cancelled; the request went anyway
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def aclose(self) -> None:
        """Wait for batches in flight (their callers are waiting on them anyway)."""
        self._flush()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
