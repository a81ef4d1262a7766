"""A repair's expiry instants come from the servers' clocks, never the worker's."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from stampede.errors import ShardResponseError
from stampede.repair._expiry import expiry_of
from stampede.testing.faults import DelegatingTopology
from stampede.testing.memory import MemoryTopology

HOUR_MS = 3_600_000


class Before7(DelegatingTopology):
    """A server without PEXPIRETIME (Redis before 7.0): PTTL only."""

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        if str(args[0]).upper() == "PEXPIRETIME":
            raise ShardResponseError("ERR unknown command 'PEXPIRETIME'", shard="memory-0")
        return await self.inner.execute(key, *args, resend=resend)


async def test_an_expiry_read_with_pttl_is_counted_from_the_servers_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without PEXPIRETIME a key's expiry instant is its PTTL added to a clock: it was
    the worker's, and a worker an hour behind wrote what it kept an hour early (its
    compare-and-set, whose past PXAT deletes, took the keys away). It is the server's
    (TIME on the key's shard), as every other instant a repair writes."""
    topology = Before7(MemoryTopology())
    key = b"k"
    at = time.time_ns() // 1_000_000 + 2 * HOUR_MS
    await topology.execute(key, "SET", key, b"v", "PXAT", str(at))
    behind = SimpleNamespace(time_ns=lambda: time.time_ns() - HOUR_MS * 1_000_000)
    monkeypatch.setattr("stampede.repair._expiry.time", behind, raising=False)
    found = await expiry_of(topology, key)
    assert found is not None and abs(found - at) < 60_000, (found, at)
    assert await expiry_of(topology, b"missing", missing=-5) == -5
