"""A write cancelled in flight: whatever of it lands is whole, floors included.

The guard leaves the floor of a key's version hash to the client when its own
call cannot reach the hash (a key with braces but no hash tag, `odd{}a`; a slot
migrating): the client raises it in a call of its own (`topology._floor`). A
caller cancelled between the guard's landing and that call (a deadline, a
`wait_for`, a task cancelled at shutdown) must not leave the delete without it:
once the tombstone expired, an older transaction pending at the key could be
completed and the deleted value would come back. Each test holds the write at
one point by an event, cancels the caller there, and lets it go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from stampede import Durability, RetryPolicy, Stampede
from stampede.repair import NewestWins
from stampede.repair import _base as repair_base
from stampede.topology import _cluster, _durable, _floor
from stampede.topology._coalesce import Fanin
from stampede.wire._txn import side_key

from ..support import open_stampede, write_newer

KEY = "odd{}a"
GROUP = "odd"


async def _pending_floor(st: Stampede) -> bytes:
    """Give `KEY` a version hash (a transaction wrote it) and load the scripts; the
    hash's name."""
    async with st.transaction() as tx:
        tx.set(KEY, b"1")
        tx.set("odd{}b", b"1")
    await st.write(GROUP, {KEY: b"1.5"})
    return side_key(KEY.encode(), st.topology.slot_of)


async def _floor_is_the_delete(st: Stampede, side: bytes) -> None:
    """The hash's floor is the stamp of the tombstone `KEY` holds (the delete's)."""
    tombstone = await st.topology.execute(KEY.encode(), "GET", KEY.encode())
    assert tombstone is not None and tombstone.count(b":") == 1  # `<version>:<token>`
    assert await st.topology.execute(side, "HGET", side, "g") == tombstone


def _hold_floor_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[Callable[[], None]], asyncio.Event]:
    """Hold every guard answer that leaves a floor to the client (10) on its way to
    its caller: (the releases of the held answers, set once one is held)."""
    held: list[Callable[[], None]] = []
    arrived = asyncio.Event()
    deliver = Fanin.deliver

    def holding(self: Fanin, index: int, result: Any) -> None:
        if isinstance(result, list) and _floor.FLOOR_ELSEWHERE in result:
            held.append(lambda: deliver(self, index, result))
            arrived.set()
            return
        deliver(self, index, result)

    monkeypatch.setattr(Fanin, "deliver", holding)
    return held, arrived


async def test_a_delete_cancelled_before_its_guard_answers_still_raises_the_floor(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is cancelled while the guard's reply (10: floor left to the client)
    is on its way: the reply is held until the cancellation is in, then let through;
    the floor is raised before the cancelled delete raises `CancelledError`."""
    side = await _pending_floor(st)
    held, arrived = _hold_floor_answers(monkeypatch)
    task = asyncio.ensure_future(st.delete(GROUP, [KEY]))
    await arrived.wait()  # the guard landed; its answer is held
    task.cancel()
    await asyncio.sleep(0)  # the cancellation reaches the caller first
    for release in held:
        release()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _floor_is_the_delete(st, side)


async def test_a_delete_cancelled_while_raising_its_floor_still_raises_it(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is cancelled while its floor call waits to go: the call goes all the
    same, and the cancelled delete raises `CancelledError` only after it."""
    side = await _pending_floor(st)
    reached, go = asyncio.Event(), asyncio.Event()
    raise_floor = _floor.raise_floor

    async def held(*args: Any, **kwargs: Any) -> int | None:
        reached.set()
        await go.wait()
        return await raise_floor(*args, **kwargs)

    monkeypatch.setattr(_floor, "raise_floor", held)
    task = asyncio.ensure_future(st.delete(GROUP, [KEY]))
    await reached.wait()
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()  # it waits for its floor
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _floor_is_the_delete(st, side)


async def test_closing_the_client_waits_for_a_cancelled_deletes_floor(
    topology_env: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shutdown as a service does it: the request's task is cancelled, then the client
    closed, while the delete's guard answer is still on its way. `aclose` waits for
    the floor the cancelled delete still owes before it closes the connections."""
    kind, env = topology_env
    st = open_stampede(env, kind)
    await st.open()
    side = await _pending_floor(st)
    held, arrived = _hold_floor_answers(monkeypatch)
    task = asyncio.ensure_future(st.delete(GROUP, [KEY]))
    await arrived.wait()
    task.cancel()
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(st.aclose())
    await asyncio.sleep(0)  # (aclose under way)
    for release in held:
        release()
    await closing
    with pytest.raises(asyncio.CancelledError):
        await task
    async with open_stampede(env, kind) as again:
        await _floor_is_the_delete(again, side)


async def test_a_durable_delete_cancelled_after_its_guard_landed_still_raises_the_floor(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable write sends the guard and its WAIT as one pipeline of its own; the
    caller is cancelled once that pipeline answered, before the floor call: the floor
    is raised all the same (the durable write runs to its end)."""
    side = await _pending_floor(st)
    reached, go = asyncio.Event(), asyncio.Event()
    sent_with_wait = _durable.sent_with_wait

    async def held(*args: Any, **kwargs: Any) -> Any:
        replies = await sent_with_wait(*args, **kwargs)
        reached.set()
        await go.wait()
        return replies

    monkeypatch.setattr(_durable, "sent_with_wait", held)
    monkeypatch.setattr(_cluster, "sent_with_wait", held)
    durably = Durability(replicas=0, aof=True)  # (WAITAOF refused on 7.0: no ack, no wait)
    task = asyncio.ensure_future(st.delete(GROUP, [KEY], durability=durably))
    await reached.wait()
    task.cancel()
    await asyncio.sleep(0)
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _floor_is_the_delete(st, side)


async def test_a_repair_cancelled_while_raising_a_floor_still_raises_it(
    st: Stampede, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's repair (a compare-and-set) rewrites `KEY`, whose floor its script leaves
    to the client; the read is cancelled (its deadline, say) while that floor call
    waits to go: the call goes all the same before the read's cancellation goes on."""
    side = await _pending_floor(st)
    keys = [KEY, "odd{}b"]
    await st.write(GROUP, dict.fromkeys(keys, b"old"))
    version, _ = await write_newer(st, [b"odd{}b"], b"new")  # torn: one key moved on
    st.versions.observe(version)
    reached, go = asyncio.Event(), asyncio.Event()
    raise_floor = _floor.raise_floor  # (what repair._base imported)

    async def held(*args: Any, **kwargs: Any) -> int | None:
        reached.set()
        await go.wait()
        return await raise_floor(*args, **kwargs)

    monkeypatch.setattr(repair_base, "raise_floor", held)
    quick = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
    task = asyncio.ensure_future(st.read(GROUP, keys, retry=quick, repair=NewestWins()))
    await reached.wait()
    task.cancel()
    await asyncio.sleep(0)
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    value = await st.topology.execute(KEY.encode(), "GET", KEY.encode())
    assert value is not None
    stamp = b":".join(value.split(b":", 2)[:2])  # the repair's `<version>:<token>`
    assert await st.topology.execute(side, "HGET", side, "g") == stamp


async def test_a_cancelled_write_that_can_owe_no_floor_is_not_held(
    stampede_primaries: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over independent primaries, a write of keys whose version hashes the guard
    names itself can owe no floor: cancelled while its answer is out, it raises at
    once, as it always did (it waits for nothing)."""
    async with open_stampede(stampede_primaries, "shards") as st:
        await st.write("plain", {"plain:a": b"1"})
        held: list[Callable[[], None]] = []
        arrived = asyncio.Event()
        deliver = Fanin.deliver

        def holding(self: Fanin, index: int, result: Any) -> None:
            held.append(lambda: deliver(self, index, result))
            arrived.set()

        monkeypatch.setattr(Fanin, "deliver", holding)
        task = asyncio.ensure_future(st.write("plain", {"plain:a": b"2"}))
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # (its answer still held)
        monkeypatch.undo()
        for release in held:
            release()
