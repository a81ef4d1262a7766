"""Deadlines for many short operations, without a timer each.

`asyncio.timeout` pushes one timer per operation onto the event loop's heap and
cancels it a moment later; at tens of thousands of reads a second that heap
(whose entries compare in Python) costs more than the read itself. Here the
deadlines of one event loop share buckets `GRAIN` seconds wide, one loop timer
per bucket: an operation registers in its bucket and unregisters by a flag.

A deadline fires when its bucket's timer runs, at most `GRAIN` seconds late,
never early. The operation's task is cancelled as `asyncio.timeout` would, and
`Deadline.expired_by_us()` tells that cancellation from anyone else's.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable

__all__ = ["GRAIN", "Deadline", "start"]

GRAIN = 0.005
"""Seconds per bucket: how late at most a deadline fires."""


class Deadline:
    """One operation's deadline; `done()` it when the operation ends."""

    __slots__ = ("_cancelling", "_task", "active", "expired")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self._task: asyncio.Task[object] | None = task
        self._cancelling = task.cancelling()
        self.active = True
        self.expired = False

    def done(self) -> None:
        """The operation ended: the deadline no longer holds its task (the bucket
        keeps this object until it fires; the task and its result need not wait)."""
        self.active = False
        self._task = None

    def expire(self) -> None:
        """The deadline passed: cancel the operation's task, unless it is done."""
        if self.active and self._task is not None:
            self.active = False
            self.expired = True
            self._task.cancel()

    def expired_by_us(self) -> bool:
        """After a `CancelledError`: True when this deadline caused it (and no one
        else asked for a cancellation meanwhile), so the caller raises its timeout.

        Takes back this deadline's cancellation request, as `asyncio.timeout` does.
        """
        if not self.expired or self._task is None:
            return False
        return self._task.uncancel() <= self._cancelling


class _Buckets:
    """The deadlines of one event loop, by bucket (`start` adds them)."""

    __slots__ = ("buckets", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buckets: dict[int, list[Deadline]] = {}

    def fire(self, index: int) -> None:
        for deadline in self.buckets.pop(index, ()):
            deadline.expire()


_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Buckets] = (
    weakref.WeakKeyDictionary()
)
_last: (
    tuple[weakref.ref[asyncio.AbstractEventLoop], dict[int, list[Deadline]], Callable[[int], None]]
    | None
) = None
"""The loop `start` served last, its buckets and their timers' callback: most
programs run one loop."""


def start(seconds: float) -> Deadline:
    """A deadline `seconds` from now for the current task (see the module)."""
    global _last
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("a deadline needs a running task")
    deadline = Deadline(task)
    last = _last
    if last is None or last[0]() is not loop:
        known = _PER_LOOP.get(loop)
        if known is None:
            known = _PER_LOOP[loop] = _Buckets(loop)
        last = _last = (weakref.ref(loop), known.buckets, known.fire)
    _, buckets, fire = last
    index = math.ceil((loop.time() + seconds) / GRAIN)  # its bucket: one loop timer each
    bucket = buckets.get(index)
    if bucket is None:
        bucket = buckets[index] = []
        loop.call_at(index * GRAIN, fire, index)
    bucket.append(deadline)
    return deadline
