"""The shared-bucket deadlines behind `Stampede.read`'s `RetryPolicy.deadline`."""

from __future__ import annotations

import asyncio

import pytest

from stampede import _deadline as deadlines


async def test_a_deadline_fires_not_early_and_at_most_a_grain_late() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    timer = deadlines.start(0.05)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(5)
    elapsed = loop.time() - started
    assert timer.expired_by_us()
    assert 0.05 <= elapsed  # never early; how late is the loop's business, not asserted
    assert asyncio.current_task() is not None
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_finished_operation_is_never_cancelled() -> None:
    timer = deadlines.start(0.01)
    timer.done()
    await asyncio.sleep(0.05)  # the bucket fires meanwhile: nothing happens
    assert not timer.expired and not timer.expired_by_us()


async def test_another_cancellation_is_not_taken_for_the_deadline() -> None:
    """Cancelled from outside before the deadline: the CancelledError is not ours."""

    async def operation() -> bool:
        timer = deadlines.start(10)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return timer.expired_by_us()
        finally:
            timer.done()
        return False

    task = asyncio.create_task(operation())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task is False


async def test_a_deadline_and_an_outside_cancel_together_stay_a_cancel() -> None:
    """Both asked for a cancellation: the outside one must still reach the task."""
    timers: list[deadlines.Deadline] = []

    async def operation() -> bool:
        timer = deadlines.start(10)
        timers.append(timer)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            if timer.expired_by_us():
                return True
            raise
        finally:
            timer.done()
        return False

    task = asyncio.create_task(operation())
    await asyncio.sleep(0.01)
    timers[0].expire()  # the deadline passes and, in the same loop turn, someone cancels
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_deadlines_share_few_timers() -> None:
    """A thousand operations with one deadline each: every one fires once."""
    fired = 0

    async def operation() -> None:
        nonlocal fired
        timer = deadlines.start(0.02)
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            assert timer.expired_by_us()
            fired += 1
        finally:
            timer.done()

    await asyncio.gather(*(operation() for _ in range(1000)))
    assert fired == 1000


def test_a_deadline_needs_a_running_task() -> None:
    with pytest.raises(RuntimeError):
        deadlines.start(1.0)
