"""No operation on the plain path leaves a reference cycle behind.

CPython frees an object the moment its last reference goes, unless it sits in a
reference cycle: then only the cyclic garbage collector frees it, and each
collection walks every young object (and, every so often, every object). A cycle
made per call is therefore a cost per call that no profile of the call shows: the
transaction's `Sent` -> callback -> `Fanin` -> answers -> `Sent` cycle made the
collector a fifth of a transaction's client CPU at 64 in flight (docs/performance.md).

Each operation below runs on both topologies with the collector saving what it
finds (`DEBUG_SAVEALL`), and no object of stampede's (its classes, its functions
and closures) may be among what it found. Objects of other libraries are not held
against it (the loop or the test runner may make some of their own meanwhile).
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import FunctionType, MethodType
from typing import Any

import pytest

from stampede import Stampede
from stampede.repair import NewestWins

from ..support import spread_keys, write_newer

Op = Callable[[Stampede, int], Awaitable[object]]


def _ours(obj: object) -> bool:
    """Is `obj` stampede's: an instance of its classes, or one of its functions?"""
    if isinstance(obj, MethodType):
        obj = obj.__func__
    if isinstance(obj, FunctionType):
        return obj.__module__.startswith("stampede")
    return type(obj).__module__.startswith("stampede")


@contextmanager
def saved_garbage() -> Iterator[list[Any]]:
    """Inside: every cycle made is kept (not freed) for the check; `found` holds it
    once the block ends."""
    found: list[Any] = []
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _write(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:w:{i}")
    await st.write(f"cyc:w:{i}", dict.fromkeys(keys, b"v"))
    return await st.read(f"cyc:w:{i}", keys)


async def _commit(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:c:{i}")
    await st.write(f"cyc:c:{i}", dict.fromkeys(keys, b"v"), mode="commit")
    return await st.read(f"cyc:c:{i}", keys, mode="commit")


async def _delete(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:d:{i}")
    await st.write(f"cyc:d:{i}", dict.fromkeys(keys, b"v"))
    await st.delete(f"cyc:d:{i}", keys)
    return await st.read(f"cyc:d:{i}", keys)


async def _counter(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:n:{i}")
    return await st.write(f"cyc:n:{i}", dict.fromkeys(keys, b"v"), versions="counter")


async def _transaction(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:t:{i}")
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"v")
        tx.delete(f"cyc:t:{i}:gone")
    return await st.read_atomic(keys)


async def _update(st: Stampede, i: int) -> object:
    keys = [f"{{cyc:u:{i}}}:{part}" for part in "abc"]
    return await st.update(f"cyc:u:{i}", keys, lambda current: dict.fromkeys(current, b"n"))


async def _repair(st: Stampede, i: int) -> object:
    keys = spread_keys(st, f"cyc:r:{i}")
    await st.write(f"cyc:r:{i}", dict.fromkeys(keys, b"v"))
    await write_newer(st, [keys[0].encode()], b"half")  # a writer that died part way
    return await st.read(f"cyc:r:{i}", keys, repair=NewestWins())


OPS: dict[str, Op] = {
    "write and read": _write,
    "commit-mode write and read": _commit,
    "delete": _delete,
    "counter write": _counter,
    "transaction and read_atomic": _transaction,
    "update": _update,
    "read repaired by NewestWins": _repair,
}


@pytest.mark.parametrize("name", list(OPS))
async def test_no_reference_cycles(st: Stampede, name: str) -> None:
    op = OPS[name]
    await op(st, 0)  # warmed: scripts loaded, connections open, tables filled
    with saved_garbage() as found:
        for i in range(1, 6):
            await op(st, i)
    ours = [obj for obj in found if _ours(obj)]
    assert not ours, f"{name} left {len(ours)} objects of stampede's in cycles: {ours[:8]!r}"
