"""SlotMap: which shard owns each of the 16384 hash slots, for client-side shards
(an even split as redis-cli makes it, or explicit ranges) and a cluster's own map."""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Mapping, Sequence, Sized
from typing import Any, Final

from ..errors import ConfigurationError
from ._slots import SLOTS, HashPolicy, keyslot

__all__ = ["SlotMap"]

_UNOWNED: Final = 0xFFFF


def _f32(value: float) -> float:
    """Round to IEEE single precision, as C `float` arithmetic does."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def _lround(value: float) -> int:
    """C `lround` for non-negative values: halves round away from zero."""
    return math.floor(value + 0.5)


def _redis_cli_lasts(shards: int) -> list[int] | None:
    """The last slot of each shard as redis-cli plans it, or None if that overflows."""
    per_shard = _f32(SLOTS / shards)
    cursor = 0.0
    first = 0
    lasts = []
    for shard in range(shards):
        last = _lround(_f32(_f32(cursor + per_shard) - 1))
        if last > SLOTS or shard == shards - 1:
            last = SLOTS - 1
        last = max(last, first)
        if last >= SLOTS:
            return None
        lasts.append(last)
        first = last + 1
        cursor = _f32(cursor + per_shard)
    return lasts


def _describe(start: int, end: int) -> str:
    return f"slot {start}" if start == end else f"slots {start}-{end}"


class SlotMap:
    """Which shard (0..n-1) owns each of the 16384 slots.

    Immutable. `shard_of` is one table lookup. Build one with `even(n)` (the split
    `redis-cli --cluster create` makes), `from_ranges({shard: [(first, last), ...]})`
    or directly from a table of one owner per slot.
    """

    __slots__ = ("_shards", "_table")

    _table: array[int]
    _shards: int

    def __init__(self, owners: Sequence[int]) -> None:
        """Build from `owners[slot]` = owning shard, for all 16384 slots.

        Shards must be numbered 0..n-1 and each must own at least one slot.
        """
        count = len(owners) if isinstance(owners, Sized) else None
        if count != SLOTS:
            got = count if count is not None else f"a value of type {type(owners).__name__}"
            raise ConfigurationError(
                f"a slot map needs an owner for each of the {SLOTS} slots, got {got}"
            )
        try:
            table = array("H", owners)
        except (OverflowError, TypeError) as exc:
            raise ConfigurationError(
                f"slot owners must be shard numbers 0..{SLOTS - 1}: {exc}"
            ) from None
        present = set(table)
        shards = max(present) + 1
        if len(present) != shards:
            missing = sorted(set(range(shards)) - present)
            raise ConfigurationError(
                f"shards must be numbered 0..{shards - 1} and each must own a slot; "
                f"shard(s) {', '.join(map(str, missing[:10]))} own none"
            )
        self._table = table
        self._shards = shards

    @classmethod
    def even(cls, shards: int) -> SlotMap:
        """Split the slots into `shards` contiguous ranges, as `redis-cli --cluster create`.

        Shard i gets the i-th range; for 3 shards: 0-5460, 5461-10922, 10923-16383.
        The arithmetic is redis-cli's, single-precision floats included, so from 78
        shards on the ranges follow its rounding rather than exact proportions. For
        the thousands of shards where that arithmetic runs past the last slot
        (7542 and more), the exact proportional split is used instead.
        """
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SLOTS:
            raise ConfigurationError(f"shards must be an integer from 1 to {SLOTS}, got {shards!r}")
        lasts = _redis_cli_lasts(shards)
        if lasts is None:
            # Round half up of (i + 1) * 16384 / n - 1, in integers.
            lasts = [((i + 1) * 2 * SLOTS - shards) // (2 * shards) for i in range(shards)]
        table = array("H", bytes(2 * SLOTS))
        first = 0
        for shard, last in enumerate(lasts):
            table[first : last + 1] = array("H", [shard]) * (last + 1 - first)
            first = last + 1
        return cls._trusted(table, shards)

    @classmethod
    def from_ranges(cls, ranges: Mapping[int, Sequence[tuple[int, int]]]) -> SlotMap:
        """Build from inclusive slot ranges per shard, e.g. `{0: [(0, 8191)], 1: [(8192, 16383)]}`.

        Every slot must be covered exactly once and every shard 0..n-1 must own
        some slots; otherwise `ConfigurationError` names the gap or overlap.
        """
        shards = len(ranges)
        if shards == 0:
            raise ConfigurationError("a slot map needs at least one shard")
        if sorted(ranges) != list(range(shards)):
            raise ConfigurationError(
                f"shards must be numbered 0..{shards - 1}, got {sorted(ranges)!r}"
            )
        table = array("H", [_UNOWNED]) * SLOTS
        for shard in range(shards):
            if not ranges[shard]:
                raise ConfigurationError(f"shard {shard} owns no slots; give it a range")
            for first, last in _pairs(shard, ranges[shard]):
                _check_range(shard, first, last)
                _claim(table, shard, first, last)
        gaps = _runs_of(table, _UNOWNED)
        if gaps:
            listed = ", ".join(_describe(a, b) for a, b in gaps[:5])
            more = f" and {len(gaps) - 5} more gaps" if len(gaps) > 5 else ""
            raise ConfigurationError(f"{listed}{more} not assigned to any shard")
        return cls._trusted(table, shards)

    @classmethod
    def _trusted(cls, table: array[int], shards: int) -> SlotMap:
        self = cls.__new__(cls)
        self._table = table
        self._shards = shards
        return self

    @property
    def shards(self) -> int:
        """The number of shards."""
        return self._shards

    def shard_of(self, slot: int) -> int:
        """Return the shard that owns `slot` (0..16383)."""
        if isinstance(slot, int) and 0 <= slot < SLOTS:
            return self._table[slot]
        raise ConfigurationError(f"slot must be in 0..{SLOTS - 1}, got {slot!r}")

    def shard_of_key(self, key: bytes | str, *, policy: HashPolicy | None = None) -> int:
        """Return the shard that owns `key` (under `policy`, if given)."""
        return self._table[keyslot(key) if policy is None else policy.keyslot(key)]

    def ranges(self) -> dict[int, list[tuple[int, int]]]:
        """Return each shard's slots as sorted inclusive ranges, shards in order."""
        out: dict[int, list[tuple[int, int]]] = {shard: [] for shard in range(self._shards)}
        table = self._table
        start = 0
        for slot in range(1, SLOTS + 1):
            if slot == SLOTS or table[slot] != table[start]:
                out[table[start]].append((start, slot - 1))
                start = slot
        return out

    def slot_counts(self) -> tuple[int, ...]:
        """Return how many slots each shard owns, indexed by shard."""
        counts = [0] * self._shards
        for owner in self._table:
            counts[owner] += 1
        return tuple(counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotMap):
            return NotImplemented
        return self._table == other._table

    def __hash__(self) -> int:
        return hash(self._table.tobytes())

    def __repr__(self) -> str:
        ranges = self.ranges()
        shown = ", ".join(
            f"{shard}: [{', '.join(f'{a}-{b}' for a, b in spans[:3])}"
            + (", ..." if len(spans) > 3 else "")
            + "]"
            for shard, spans in list(ranges.items())[:4]
        )
        more = ", ..." if self._shards > 4 else ""
        return f"<SlotMap shards={self._shards} {{{shown}{more}}}>"


def _pairs(shard: int, given: Any) -> list[tuple[int, int]]:
    """A shard's ranges as (first, last) pairs; `ConfigurationError` for any other shape
    (one pair not in a list, say)."""
    try:
        pairs = [(first, last) for first, last in given]
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"shard {shard}: its slot ranges must be a list of (first, last) pairs such "
            f"as [(0, 8191)], got {given!r:.60}"
        ) from None
    return pairs


def _check_range(shard: int, first: int, last: int) -> None:
    for bound in (first, last):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise ConfigurationError(
                f"shard {shard}: slot range bounds must be integers, got ({first!r}, {last!r})"
            )
    if not 0 <= first <= last < SLOTS:
        raise ConfigurationError(
            f"shard {shard}: slot range ({first}, {last}) must satisfy "
            f"0 <= first <= last <= {SLOTS - 1}"
        )


def _claim(table: array[int], shard: int, first: int, last: int) -> None:
    for slot in range(first, last + 1):
        owner = table[slot]
        if owner != _UNOWNED:
            end = slot
            while end < last and table[end + 1] == owner:
                end += 1
            who = "shard" if owner == shard else f"shards {owner} and"
            raise ConfigurationError(f"{_describe(slot, end)} assigned twice: to {who} {shard}")
        table[slot] = shard


def _runs_of(table: array[int], value: int) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = -1
    for slot, owner in enumerate(table):
        if owner == value:
            if start < 0:
                start = slot
        elif start >= 0:
            runs.append((start, slot - 1))
            start = -1
    if start >= 0:
        runs.append((start, SLOTS - 1))
    return runs
