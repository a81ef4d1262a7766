"""Where a write's version comes from: `Counter` or `HybridClock`.

- `Counter`: INCR on `<group>:stampede:version`. Strictly ordered per group across
  every writer, at the price of one more round trip per write.
- `HybridClock`: a hybrid logical clock, `ms_since_epoch * 2**16 + logical`. No
  round trip; ordered across writers up to their clock skew, and never backwards
  within one process, even when the wall clock steps back.

Ties between equal versions break by token (ULIDs), so the order is total either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .envelope import MAX_VERSION
from .verdict import version_key

if TYPE_CHECKING:
    from .topology.base import Topology

__all__ = ["Counter", "HybridClock", "VersionSource"]

LOGICAL_BITS = 16
_LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


@runtime_checkable
class VersionSource(Protocol):
    """Gives each logical write of a group a version."""

    @property
    def needs_round_trip(self) -> bool:
        """True when `next_version` talks to Redis."""
        ...

    async def next_version(self, group: bytes, topology: Topology) -> int:
        """A version for a new write of `group`, newer than this source gave before."""
        ...

    def observe(self, version: int) -> None:
        """Learn of a version seen elsewhere (a read or a lost race), to stay ahead."""
        ...


class Counter:
    """Versions from INCR on `<group>:stampede:version` (one round trip per write)."""

    needs_round_trip = True

    async def next_version(self, group: bytes, topology: Topology) -> int:
        return await topology.incr(version_key(group))

    def observe(self, version: int) -> None:
        """The counter lives in Redis: nothing to learn locally."""

    def __repr__(self) -> str:
        return "Counter()"


class HybridClock:
    """A hybrid logical clock: physical milliseconds in the high bits, a counter below.

    `clock` returns milliseconds since the epoch (default: the wall clock) and
    `offset_ms` shifts it, which the fault-injection tests use to skew writers.
    """

    needs_round_trip = False

    def __init__(self, *, clock: Callable[[], int] | None = None, offset_ms: int = 0) -> None:
        self._clock = clock or _wall_ms
        self.offset_ms = offset_ms
        self._last = 0

    def now(self) -> int:
        """The next version: physical time when it moved on, else the last one plus one."""
        physical = (self._clock() + self.offset_ms) << LOGICAL_BITS
        last = self._last
        version = physical if physical > last else last + 1
        if version > MAX_VERSION:
            raise OverflowError("hybrid clock passed 2**63; is the clock source sane?")
        self._last = version
        return version

    async def next_version(self, group: bytes, topology: Topology) -> int:
        return self.now()

    def observe(self, version: int) -> None:
        """Move past a version seen from another writer (the HLC receive rule)."""
        if version > self._last:
            self._last = version

    @staticmethod
    def physical_ms(version: int) -> int:
        """The wall-clock milliseconds a hybrid version carries."""
        return version >> LOGICAL_BITS

    @staticmethod
    def logical(version: int) -> int:
        return version & _LOGICAL_MASK

    def __repr__(self) -> str:
        return f"HybridClock(offset_ms={self.offset_ms})"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000
