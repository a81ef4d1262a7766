"""What a guarded write does when a key holds a clock version from the future.

The guard refuses (`FUTURE`) a write to a key whose stored clock version is beyond
the write's limit (its clock plus `max_offset`): a clock ran ahead, or another
program stamped the key. Two cases are not that:

- the write was held up and its clock moved on meanwhile: it is sent again, same
  stamp, under a fresh limit (`fresh_limit`), and meets an honest newer write;
- the write is a delete, the documented way out of such a key ("fix the clock, then
  delete the group"): each value still beyond the limit, and beyond its server's
  clock (so it is not the deleter's clock that is behind), is removed (compare and
  delete: only that value), and the delete is sent again, so its tombstones land
  (`DeletePut`). Without it no delete could clear a key stamped a year (or, by
  another program, centuries) ahead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Sequence
from typing import Protocol, Unpack

from .errors import MalformedEnvelope
from .topology._base import WriteOutcome
from .topology._guard import CAS, FUTURE
from .typing import GuardStamp, Topology, VersionSource
from .versions import HybridClock
from .wire import Envelope, VersionKind, kind_of

__all__ = ["DeletePut", "Put", "clear_future", "fresh_limit", "fresher_limit", "limit_for"]


class Put(Protocol):
    """What sends a guarded write: `Topology.write_guarded`, or a `DeletePut`."""

    def __call__(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> Awaitable[WriteOutcome]: ...


def limit_for(versions: VersionSource, version: int) -> int:
    """The newest stored clock version a write accepts as real (0: no check)."""
    if isinstance(versions, HybridClock) and kind_of(version) is VersionKind.CLOCK:
        return max(version, versions.horizon())
    return 0


def fresher_limit(clock: VersionSource, version: int, limit: int, codes: Iterable[int]) -> int:
    """A fresh limit when a key refused the version as `FUTURE` and the clock moved on
    since `limit` was set: a write held up meets a newer one, no skew (else 0)."""
    fresh = limit_for(clock, version) if limit and FUTURE in codes else 0
    return fresh if fresh > limit else 0


def fresh_limit(versions: VersionSource, stamp: GuardStamp, outcome: WriteOutcome) -> bool:
    """True, with the fresh limit in `stamp`, when a key refused the write as `FUTURE`
    and the clock moved on since its limit was set (`fresher_limit`): the write is
    sent again, same stamp, under it."""
    codes = outcome.results.values()
    if FUTURE not in codes:
        return False
    fresh = fresher_limit(versions, stamp["version"], stamp["limit"], codes)
    if fresh:
        stamp["limit"] = fresh
    return bool(fresh)


async def clear_future(
    topology: Topology, outcome: WriteOutcome, limit: int, max_offset_ns: int
) -> bool:
    """Remove the value of each key that refused a write as `FUTURE` if it still holds
    a clock version beyond `limit` and beyond its server's clock plus `max_offset_ns`
    (compare and delete: a value written since stays); True when any key was cleared
    or has gone meanwhile. A value ahead of the writer's clock but not of the
    server's stays: the writer's clock is behind, and its delete is refused."""
    cleared = False
    for key, code in outcome.results.items():
        if code != FUTURE:
            continue
        raw = await topology.execute(key, "GET", key)
        if raw is None:
            cleared = True
            continue
        try:
            version = Envelope.decode(raw, key=key).version
        except MalformedEnvelope:
            continue
        if kind_of(version) is not VersionKind.CLOCK or version <= limit:
            continue
        seconds, micros = await topology.execute(key, "TIME")
        if version <= (int(seconds) * 1_000_000 + int(micros)) * 1000 + max_offset_ns:
            continue
        done = await topology.script(CAS, [key], [0, "1", raw, "d", b""])
        cleared = cleared or done[0] == 1
    return cleared


class DeletePut:
    """`topology.write_guarded` for a delete: a key refused as `FUTURE` under a fresh
    limit (a value from a clock beyond the delete's, not a newer write met late) is
    cleared and the delete sent again, same stamp."""

    __slots__ = ("topology", "versions")

    def __init__(self, topology: Topology, versions: VersionSource) -> None:
        self.topology, self.versions = topology, versions

    async def __call__(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        put = self.topology.write_guarded
        outcome = await put(keys, values, **stamp)
        if not stamp["limit"] or FUTURE not in outcome.results.values():
            return outcome
        if fresh_limit(self.versions, stamp, outcome):  # held up: a newer write, no skew?
            outcome = await put(keys, values, **stamp)
        versions = self.versions
        if FUTURE in outcome.results.values() and isinstance(versions, HybridClock):
            offset = versions.max_offset_ns
            if await clear_future(self.topology, outcome, stamp["limit"], offset):
                outcome = await put(keys, values, **stamp)
        return outcome
