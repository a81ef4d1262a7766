"""How a sample of keys spreads over slots and shards: hottest slots and skew.

`analyze(keys, shards=3)` counts a finished sample. For a live SCAN, feed a
`SlotCounter` batch by batch (`counter.update(batch)`) and take `result()` at the
end: it keeps 16384 counters and one example key per slot, never the keys.
"""

from __future__ import annotations

import heapq
from binascii import crc_hqx
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ._slotmap import SlotMap
from ._slots import SLOTS, HashPolicy, key_sample, to_bytes

__all__ = ["Distribution", "SlotCount", "SlotCounter", "analyze", "summarise"]

_MASK = SLOTS - 1


@dataclass(frozen=True, slots=True)
class SlotCount:
    """One slot of a distribution: its key count, owning shard and first key seen."""

    slot: int
    count: int
    shard: int
    example: bytes


@dataclass(frozen=True, slots=True)
class Distribution:
    """Where a sample of keys falls: per shard, per slot, and how uneven that is.

    `skew` is the largest shard's count over the mean shard count: 1.0 is a
    perfectly even spread, `shards` means every key is on one shard. With no keys
    at all it is 1.0 (every shard holds the mean, zero).
    """

    total: int
    """Keys counted."""
    tagged: int
    """Keys hashed by a tag (a hash tag, or a `HashPolicy` rule) instead of whole."""
    slot_map: SlotMap
    shard_counts: tuple[int, ...]
    """Keys per shard, indexed by shard."""
    occupied_slots: int
    """Slots holding at least one key."""
    hottest: tuple[SlotCount, ...]
    """The fullest slots, most keys first (ties: lower slot first)."""

    @property
    def shards(self) -> int:
        """Number of shards."""
        return self.slot_map.shards

    @property
    def mean(self) -> float:
        """Mean keys per shard."""
        return self.total / self.shards

    @property
    def skew(self) -> float:
        """Largest shard count / mean shard count (1.0 = even; 1.0 with no keys)."""
        if self.total == 0:
            return 1.0
        return max(self.shard_counts) / self.mean

    @property
    def hottest_shard(self) -> int:
        """The shard with the most keys (the lowest-numbered one on a tie)."""
        return max(range(self.shards), key=lambda shard: (self.shard_counts[shard], -shard))

    @property
    def empty_shards(self) -> tuple[int, ...]:
        """Shards that received no key."""
        return tuple(shard for shard, count in enumerate(self.shard_counts) if count == 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (keys as text, undecodable bytes backslash-escaped)."""
        ranges = self.slot_map.ranges()
        return {
            "total": self.total,
            "tagged": self.tagged,
            "shards": [
                {
                    "shard": shard,
                    "keys": count,
                    "slots": [list(span) for span in ranges[shard]],
                }
                for shard, count in enumerate(self.shard_counts)
            ],
            "skew": round(self.skew, 4),
            "hottest_shard": self.hottest_shard,
            "empty_shards": list(self.empty_shards),
            "occupied_slots": self.occupied_slots,
            "hottest_slots": [
                {
                    "slot": hot.slot,
                    "keys": hot.count,
                    "shard": hot.shard,
                    "example": hot.example.decode("utf-8", "backslashreplace"),
                }
                for hot in self.hottest
            ],
        }


def _slot_map(shards: int | SlotMap) -> SlotMap:
    if isinstance(shards, SlotMap):
        return shards
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise ConfigurationError(f"shards must be an int or a SlotMap, not {shards!r}")
    return SlotMap.even(shards)


class SlotCounter:
    """Counts keys per slot as they arrive; `result()` summarises at any point.

    Memory is constant: 16384 counters and the first key seen in each slot.
    Keys are counted as given: feed distinct keys (SCAN may repeat a key).
    """

    __slots__ = ("_counts", "_examples", "_map", "_policy", "_tagged", "_total")

    def __init__(self, *, shards: int | SlotMap = 1, policy: HashPolicy | None = None) -> None:
        self._map = _slot_map(shards)
        self._policy = policy
        self._counts = [0] * SLOTS
        self._examples: dict[int, bytes] = {}
        self._total = 0
        self._tagged = 0

    @property
    def total(self) -> int:
        """Keys counted so far."""
        return self._total

    def add(self, key: bytes | str) -> int:
        """Count one key; return its slot."""
        raw = to_bytes(key)
        part = tag_of(raw, self._policy)
        slot = crc_hqx(raw if part is None else part, 0) & _MASK
        self._count(raw, slot, part is not None)
        return slot

    def update(self, keys: Iterable[bytes | str]) -> None:
        """Count every key of `keys`."""
        policy = self._policy
        for key in key_sample(keys, "SlotCounter.update()"):
            raw = key if type(key) is bytes else to_bytes(key)
            part = tag_of(raw, policy)
            self._count(raw, crc_hqx(raw if part is None else part, 0) & _MASK, part is not None)

    def _count(self, raw: bytes, slot: int, tagged: bool) -> None:
        if not self._counts[slot]:
            self._examples[slot] = raw
        self._counts[slot] += 1
        self._total += 1
        self._tagged += tagged

    def result(self, *, top: int = 10) -> Distribution:
        """Summarise what was counted, with the `top` fullest slots."""
        if top < 0:
            raise ConfigurationError(f"top must be 0 or more, got {top}")
        distribution, _ = summarise(
            self._counts, self._map, tagged=self._tagged, top=top, examples=self._examples
        )
        return distribution


def summarise(
    counts: Sequence[int],
    slot_map: SlotMap,
    *,
    tagged: int,
    top: int,
    examples: Mapping[int, bytes],
) -> tuple[Distribution, list[int]]:
    """The `Distribution` of per-slot `counts`, and its `top` fullest slots."""
    shard_counts = [0] * slot_map.shards
    occupied = 0
    for slot, n in enumerate(counts):
        if n:
            shard_counts[slot_map.shard_of(slot)] += n
            occupied += 1
    fullest = heapq.nsmallest(
        top, (slot for slot in range(SLOTS) if counts[slot]), key=lambda s: (-counts[s], s)
    )
    distribution = Distribution(
        total=sum(shard_counts),
        tagged=tagged,
        slot_map=slot_map,
        shard_counts=tuple(shard_counts),
        occupied_slots=occupied,
        hottest=tuple(
            SlotCount(s, counts[s], slot_map.shard_of(s), examples.get(s, b"")) for s in fullest
        ),
    )
    return distribution, fullest


def tag_of(raw: bytes, policy: HashPolicy | None) -> bytes | None:
    """The part hashed instead of the whole key (policy rule, else hash tag), or None."""
    if policy is not None:
        part = policy.tag(raw)
        if part is not None:
            return part
    start = raw.find(b"{")
    if start < 0:
        return None
    end = raw.find(b"}", start + 1)
    return raw[start + 1 : end] if end > start + 1 else None


def analyze(
    keys: Iterable[bytes | str],
    *,
    shards: int | SlotMap = 1,
    policy: HashPolicy | None = None,
    top: int = 10,
) -> Distribution:
    """Count `keys` per slot and per shard and summarise the spread.

    `shards` is a number of evenly split shards (as `SlotMap.even`) or a
    `SlotMap`; `policy` hashes keys with a `HashPolicy` instead of the standard
    rule; `top` is how many of the fullest slots to report.

    >>> d = analyze(["a", "b", "c", "user:{1}:x", "user:{1}:y"], shards=3)
    >>> d.total, d.shard_counts, d.hottest[0].count
    (5, (1, 3, 1), 2)
    """
    counter = SlotCounter(shards=shards, policy=policy)
    counter.update(key_sample(keys, "analyze()"))
    return counter.result(top=top)
