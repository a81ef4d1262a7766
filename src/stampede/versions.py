"""Where a write's version comes from: `Counter` or `HybridClock`.

- `Counter`: INCR on `<group>:stampede:version`. Strictly ordered per group across
  every writer, at the price of one more round trip per write. Sequence versions.
- `HybridClock`: a hybrid logical clock in nanoseconds since the epoch: the wall
  clock when it moved on, else the last version plus one. No round trip; ordered
  across writers up to their clock skew, and never backwards within one process.
  Clock versions (2**56 and above).

Ties between equal versions break by token (ULIDs), so the order is total either
way. The two kinds cannot be ordered against each other: a group keeps one kind.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ._lua import script
from .errors import ConfigurationError, StampedeError
from .wire import CLOCK_FLOOR, MAX_VERSION, version_key

if TYPE_CHECKING:
    from .typing import Topology

__all__ = ["COUNTER", "DEFAULT_MAX_OFFSET", "Counter", "HybridClock"]

_MAX_OFFSET = 86_400.0
DEFAULT_MAX_OFFSET = 5.0
"""Seconds a clock version may be ahead of this clock before it is refused."""
_NS = 1_000_000_000

log = logging.getLogger("stampede.versions")


COUNTER = script("counter")
_COUNTER_FLOOR = script("counter_floor")


class Counter:
    """Versions from INCR on `<group>:stampede:version` (one round trip per write).

    Given the write's expiry instant, the counter lives as long as that write plus
    `Counter.outlive` seconds (and without one, as long as the group's data may), so
    the counter of a deleted or expired group is collected by Redis itself.
    """

    needs_round_trip = True
    outlive = 3600.0
    """Seconds the counter outlives the newest write it versioned (a late, older write
    landing after the group expired is still older than what comes next)."""

    async def next_version(
        self, group: bytes, topology: Topology, *, expire_at_ms: int | None = None
    ) -> int:
        """The next version of `group`; `expire_at_ms` is the expiry instant (unix ms)
        of the write it is for (None: the write has none)."""
        key = version_key(group)
        # Resent after a lost reply: a counter only has to grow; a resend leaves a gap.
        args = [expire_at_ms or 0, round(self.outlive * 1000)]
        return int(await topology.script(COUNTER, [key], args))

    async def catch_up(self, group: bytes, topology: Topology, keys: Sequence[bytes]) -> None:
        """Raise the counter of `group` to the newest sequence version stored at `keys`,
        where a write of it was just kept out. A counter that went back (lost in a
        failover before a replica had it, or evicted) hands out versions older than
        the data; without this every write is kept out until it passes them, with it
        only the one that found out. Best effort: the write stands as reported."""
        newest = 0
        with contextlib.suppress(StampedeError):
            for key in keys:
                head = (await topology.execute(key, "GET", key) or b"").partition(b":")[0]
                if head.isdigit() and not head.startswith(b"0") and len(head) < 20:
                    newest = max(newest, int(head))
            if 0 < newest < CLOCK_FLOOR:
                await topology.script(_COUNTER_FLOOR, [version_key(group)], [newest])

    def observe(self, version: int) -> None:
        """The counter lives in Redis: nothing to learn locally."""

    def __repr__(self) -> str:
        return "Counter()"


class HybridClock:
    """A hybrid logical clock with nanosecond resolution.

    `now()` is the wall clock in nanoseconds since the epoch when it has moved
    past the last version, else the last version plus one; versions stay below
    2**63 until the year 2262. `observe(v)` moves the clock past a version seen
    from another writer (the HLC receive rule), so a write that follows a read
    is ordered after what it read; but a version more than `max_offset` seconds
    ahead of this clock is refused, counted in `refused` and logged, never
    adopted: one stored envelope with a wild version (a clock a year ahead, a
    restored backup, another program) cannot drag every writer into its future.

    `clock` returns nanoseconds since the epoch (default: the wall clock) and
    `offset_ms` shifts it, which the fault-injection tests use to skew writers.
    """

    needs_round_trip = False

    def __init__(
        self,
        *,
        clock: Callable[[], int] | None = None,
        offset_ms: int = 0,
        max_offset: float = DEFAULT_MAX_OFFSET,
    ) -> None:
        if isinstance(max_offset, bool) or not isinstance(max_offset, int | float):
            raise ConfigurationError(
                f"max_offset must be a number of seconds, got {type(max_offset).__name__}"
            )
        if not 0 < max_offset <= _MAX_OFFSET:
            raise ConfigurationError(
                f"max_offset must be a positive number of seconds, at most {_MAX_OFFSET:g} "
                f"(a day), got {max_offset!r}"
            )
        self._clock = clock or time.time_ns
        self.offset_ms = offset_ms
        self.max_offset = max_offset
        self.max_offset_ns = int(max_offset * _NS)
        self._last = 0
        self.refused = 0
        """How many observed versions were refused as too far ahead."""
        self.last_refused: int | None = None

    def physical(self) -> int:
        """This clock's reading: nanoseconds since the epoch, offset applied."""
        return self._clock() + self.offset_ms * 1_000_000

    def now(self) -> int:
        """The next version: physical time when it moved on, else the last one plus one."""
        return self._next(self.physical())

    def _next(self, physical: int) -> int:
        last = self._last
        version = physical if physical > last else last + 1
        if not CLOCK_FLOOR <= version <= MAX_VERSION:
            raise ConfigurationError(
                f"the hybrid clock read {physical} ns since the epoch, outside the range of "
                "clock versions (1972 to 2262); is the clock source sane?"
            )
        self._last = version
        return version

    async def next_version(self, group: bytes, topology: Topology) -> int:
        return self.now()

    def stamp(self) -> tuple[int, int]:
        """`now()` and the limit a write of that version sends, `max(version, horizon())`,
        from one reading of the clock."""
        physical = self.physical()
        version = self._next(physical)
        horizon = physical + self.max_offset_ns
        return version, version if version > horizon else horizon

    def horizon(self) -> int:
        """The newest clock version this clock accepts as real: now plus `max_offset`."""
        return self.physical() + self.max_offset_ns

    def observe(self, version: int) -> None:
        """Move past a version seen from another writer, unless it is too far ahead."""
        if version <= self._last:
            return
        if version < CLOCK_FLOOR:
            return  # a sequence version says nothing about time
        if version > self.horizon():
            self.refused += 1
            self.last_refused = version
            log.warning(
                "hybrid clock refused a version %.3f s ahead of its clock (max_offset %.3f s); "
                "a writer's clock runs ahead, or another program stamped it",
                (version - self.physical()) / _NS,
                self.max_offset,
                extra={"version": version, "refused": self.refused},
            )
            return
        self._last = version

    @staticmethod
    def physical_ms(version: int) -> int:
        """The wall-clock milliseconds a clock version carries."""
        return version // 1_000_000

    def __repr__(self) -> str:
        return f"HybridClock(offset_ms={self.offset_ms}, max_offset={self.max_offset})"
