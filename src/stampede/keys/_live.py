"""Live hot-slot analysis: how the keys of running servers spread over slots and shards.

`await live_slots(topology)` asks every primary of a `Topology` (a Redis Cluster
or client-side shards) and reports per-shard and per-slot key counts, skew, the
hottest slots and the hash tags that make them hot. Shards are the topology's
real ones: for a cluster, the slot map its nodes report (`CLUSTER SHARDS`, else
`CLUSTER SLOTS`), not an even split; for client-side shards, their `SlotMap`.

Two ways to count, `method=`:

- `"slot-stats"`: `CLUSTER SLOT-STATS` (Valkey >= 8.0, Redis >= 8.2) gives every
  slot's key count from the server itself, without reading a key, and, where
  `cluster-slot-stats-enabled` is on, CPU time and network bytes per slot. The
  tags of the hottest slots come from a sample of their keys
  (`CLUSTER GETKEYSINSLOT`).
- `"scan"`: `SCAN` on every primary (all at once, `count` keys per call), each key
  counted in its slot under the topology's hashing rule. Tags per slot are kept
  as a small heavy-hitter summary (exact for slots with up to 8 distinct tags).
- `"auto"` (the default): slot-stats on a cluster whose nodes have it (and no
  `match`), else scan.

This module does I/O through the `Topology` it is given; it imports no client.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigurationError, ShardResponseError
from ._analysis import Distribution, summarise
from ._live_scan import TAG_SUMMARY_SIZE, ScanProgress, by_scan, sample_tags
from ._replies import parse_slot_stats, ranges_from_shards, ranges_from_slots, text
from ._slotmap import SlotMap
from ._slots import SLOTS

if TYPE_CHECKING:
    from ..typing import Topology

__all__ = [
    "TAG_SUMMARY_SIZE",
    "HotSlot",
    "LiveSlots",
    "Method",
    "ScanProgress",
    "cluster_slot_map",
    "live_slots",
]

Method = Literal["auto", "scan", "slot-stats"]
_METHODS = ("auto", "scan", "slot-stats")


_TAG_SAMPLE = 1000  # keys read per hot slot with GETKEYSINSLOT under slot-stats
_STAT_FIELDS = ("cpu-usec", "network-bytes-in", "network-bytes-out")


@dataclass(frozen=True, slots=True)
class HotSlot:
    """One of the fullest slots: its count, owner, the tags that fill it, and its load."""

    slot: int
    keys: int
    shard: str
    """The name (host:port) of the primary that owns the slot."""
    tags: tuple[tuple[bytes, int], ...]
    """The hash tags found in the slot with their key counts, most first."""
    example: bytes | None
    """A key of the slot (the first seen), None when none was read."""
    stats: Mapping[str, int] = field(default_factory=dict)
    """`CLUSTER SLOT-STATS` load figures, when enabled: cpu-usec, network-bytes-in/out."""

    @property
    def tagged_keys(self) -> int:
        """Keys of the slot accounted for by the listed tags."""
        return sum(count for _, count in self.tags)


@dataclass(frozen=True, slots=True)
class LiveSlots:
    """The result of `live_slots`: a `Distribution` over the topology's real shards."""

    method: Literal["scan", "slot-stats"]
    """How keys were counted."""
    kind: str
    """The topology: "cluster" or "shards"."""
    shard_names: tuple[str, ...]
    """Shard i of `distribution` is the primary `shard_names[i]`."""
    distribution: Distribution
    """Counts per shard and slot, skew and the hottest slots (shards by index)."""
    hottest: tuple[HotSlot, ...]
    """The fullest slots with their tags (and load, under slot-stats)."""
    slot_keys: tuple[int, ...]
    """Keys per slot, all 16384."""
    scanned: int = 0
    """Keys SCAN returned (0 under slot-stats); SCAN may repeat a key while a table resizes."""
    misplaced: Mapping[str, int] = field(default_factory=dict)
    """Keys found on a primary that does not own their slot, per primary (should be empty)."""
    stats_enabled: bool = False
    """Whether CPU and network figures per slot were available."""

    @property
    def total(self) -> int:
        return self.distribution.total

    @property
    def shard_counts(self) -> dict[str, int]:
        """Keys per primary, by name."""
        return dict(zip(self.shard_names, self.distribution.shard_counts, strict=True))

    @property
    def skew(self) -> float:
        return self.distribution.skew

    @property
    def hottest_shard(self) -> str:
        return self.shard_names[self.distribution.hottest_shard]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready report (keys and tags as text, undecodable bytes escaped)."""
        base = self.distribution.to_dict()
        for entry in base["shards"]:
            entry["name"] = self.shard_names[entry["shard"]]
        base["hottest_shard"] = self.hottest_shard
        base["empty_shards"] = [self.shard_names[s] for s in self.distribution.empty_shards]
        base["hottest_slots"] = [
            {
                "slot": hot.slot,
                "keys": hot.keys,
                "shard": hot.shard,
                "tags": [{"tag": text(tag), "keys": count} for tag, count in hot.tags],
                "example": None if hot.example is None else text(hot.example),
            }
            | ({"stats": dict(hot.stats)} if hot.stats else {})
            for hot in self.hottest
        ]
        return {
            "method": self.method,
            "topology": self.kind,
            "scanned": self.scanned,
            "misplaced": dict(self.misplaced),
            "slot_stats_enabled": self.stats_enabled,
            **base,
            "slot_keys": {str(slot): n for slot, n in enumerate(self.slot_keys) if n},
        }


# -- the cluster's slot map ------------------------------------------------------------


async def cluster_slot_map(topology: Topology) -> tuple[tuple[str, ...], SlotMap]:
    """The cluster's slot map as its nodes report it: (primary names, `SlotMap`).

    Shard i of the map is the primary `names[i]`, in `topology.shard_names` order
    (primaries the reply names but the topology does not know are appended).
    Asks `CLUSTER SHARDS` (Redis >= 7.0, Valkey), else `CLUSTER SLOTS`. Slots no
    primary serves are refused with `ConfigurationError`.
    """
    known = list(topology.shard_names)
    if not known:
        raise ConfigurationError("the cluster topology knows no primary; is it open?")
    ids = await _node_ids(topology, known)
    try:
        reply = await topology.execute_on(known[0], "CLUSTER", "SHARDS")
        owned = ranges_from_shards(reply, known, ids)
    except ShardResponseError:  # before Redis 7.0: no CLUSTER SHARDS
        owned = ranges_from_slots(await topology.execute_on(known[0], "CLUSTER", "SLOTS"), ids)
    names = [name for name in known if name in owned] + sorted(set(owned) - set(known))
    slot_map = SlotMap.from_ranges({i: owned[name] for i, name in enumerate(names)})
    return tuple(names), slot_map


async def _node_ids(topology: Topology, names: Sequence[str]) -> dict[str, str]:
    """Node id -> the topology's name of that primary (`CLUSTER MYID`): the replies
    name nodes by the address they announce, which an `address_remap` (a proxy, a
    NAT) makes differ from the one the topology connects to."""
    replies = await asyncio.gather(
        *(topology.execute_on(name, "CLUSTER", "MYID") for name in names), return_exceptions=True
    )
    return {
        (r.decode() if isinstance(r, bytes) else str(r)): name
        for name, r in zip(names, replies, strict=True)
        if not isinstance(r, BaseException)
    }


async def _shard_layout(topology: Topology) -> tuple[tuple[str, ...], SlotMap]:
    if topology.slot_bound:  # the servers' own map, fresh
        return await cluster_slot_map(topology)
    return tuple(topology.shard_names), topology.slot_map


# -- counting --------------------------------------------------------------------------


async def _slot_stats(topology: Topology, primaries: Sequence[str]) -> dict[int, dict[str, int]]:
    """Every primary's `CLUSTER SLOT-STATS SLOTSRANGE 0 16383` (each reports its own slots)."""
    replies = await asyncio.gather(
        *(
            topology.execute_on(shard, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, SLOTS - 1)
            for shard in primaries
        )
    )
    stats: dict[int, dict[str, int]] = {}
    for reply in replies:
        stats.update(parse_slot_stats(reply))
    return stats


async def _has_slot_stats(topology: Topology, shard: str) -> bool:
    try:
        await topology.execute_on(shard, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, 0)
    except ShardResponseError:  # unknown command or subcommand
        return False
    return True


async def live_slots(
    topology: Topology,
    *,
    top: int = 10,
    method: Method = "auto",
    match: bytes | str | None = None,
    count: int = 1000,
    progress: Callable[[ScanProgress], None] | None = None,
) -> LiveSlots:
    """Count the keys of every primary of `topology` per slot and shard (see the module doc).

    `top` is how many of the fullest slots to report; `match` a SCAN MATCH pattern
    (forces `method="scan"`); `count` the SCAN COUNT hint; `progress` is called
    after every SCAN batch. Raises `ConfigurationError` for `method="slot-stats"`
    where the servers lack `CLUSTER SLOT-STATS`, and the topology's `ShardError`s
    when a primary cannot be reached.

    ```python
    async with stampede.connect(url, cluster=True) as st:
        report = await live_slots(st.topology, top=5)
    report.shard_counts, report.skew, report.hottest[0].tags
    ```
    """
    if method not in _METHODS:
        raise ConfigurationError(f"method must be one of {', '.join(_METHODS)}, not {method!r}")
    if top < 0 or count < 1:
        raise ConfigurationError(f"need top >= 0 and count >= 1, got {top} and {count}")
    pattern = _match_bytes(match)
    names, slot_map = await _shard_layout(topology)
    chosen: Literal["scan", "slot-stats"] = "scan"
    if method != "scan" and topology.slot_bound and pattern is None:
        if await _has_slot_stats(topology, names[0]):
            chosen = "slot-stats"
    if method == "slot-stats" and chosen != "slot-stats":
        why = (
            "a MATCH pattern needs SCAN"
            if pattern is not None
            else (
                "the servers have no CLUSTER SLOT-STATS (Valkey >= 8.0, Redis >= 8.2)"
                if topology.slot_bound
                else "CLUSTER SLOT-STATS needs a cluster"
            )
        )
        raise ConfigurationError(f"method='slot-stats' is not available: {why}")
    if chosen == "slot-stats":
        return await _report_from_stats(topology, names, slot_map, top=top)
    tally, misplaced = await by_scan(
        topology, names, slot_map, match=pattern, count=count, progress=progress
    )
    distribution, fullest = summarise(
        tally.counts, slot_map, tagged=tally.tagged, top=top, examples=tally.examples
    )
    hottest = tuple(
        HotSlot(
            slot=slot,
            keys=tally.counts[slot],
            shard=names[slot_map.shard_of(slot)],
            tags=tuple(
                sorted(tally.tags.get(slot, {}).items(), key=lambda item: (-item[1], item[0]))
            ),
            example=tally.examples.get(slot),
        )
        for slot in fullest
    )
    return _live(
        "scan", topology, names, distribution, hottest, tally.counts,
        scanned=tally.seen, misplaced=misplaced,
    )  # fmt: skip


async def _report_from_stats(
    topology: Topology, names: tuple[str, ...], slot_map: SlotMap, *, top: int
) -> LiveSlots:
    stats = await _slot_stats(topology, names)
    counts = [0] * SLOTS
    for slot, fields in stats.items():
        counts[slot] = fields.get("key-count", 0)
    enabled = any(name in fields for fields in stats.values() for name in _STAT_FIELDS)
    fullest_counts = heapq.nsmallest(
        top, (slot for slot in range(SLOTS) if counts[slot]), key=lambda s: (-counts[s], s)
    )
    samples = await asyncio.gather(
        *(
            sample_tags(topology, names[slot_map.shard_of(slot)], slot, _TAG_SAMPLE)
            for slot in fullest_counts
        )
    )
    examples = {slot: ex for slot, (_, ex) in zip(fullest_counts, samples, strict=True) if ex}
    # Keys hashed by a tag are only known for the sampled slots; the total is a lower bound.
    tagged = sum(sum(n for _, n in tags) for tags, _ in samples)
    distribution, fullest = summarise(counts, slot_map, tagged=tagged, top=top, examples=examples)
    hottest = tuple(
        HotSlot(
            slot=slot,
            keys=counts[slot],
            shard=names[slot_map.shard_of(slot)],
            tags=tags,
            example=example,
            stats={k: v for k, v in stats.get(slot, {}).items() if k in _STAT_FIELDS},
        )
        for slot, (tags, example) in zip(fullest, samples, strict=True)
    )
    return _live(
        "slot-stats", topology, names, distribution, hottest, counts, stats_enabled=enabled
    )


def _live(
    method: Literal["scan", "slot-stats"],
    topology: Topology,
    names: tuple[str, ...],
    distribution: Distribution,
    hottest: tuple[HotSlot, ...],
    counts: Sequence[int],
    **found: Any,
) -> LiveSlots:
    """A `LiveSlots` report of `method` over `topology`'s shards."""
    kind = "cluster" if topology.slot_bound else "shards"
    return LiveSlots(method, kind, names, distribution, hottest, tuple(counts), **found)


def _match_bytes(match: bytes | str | None) -> bytes | None:
    """A SCAN MATCH pattern as bytes; `ConfigurationError` for one that cannot be."""
    if match is None or isinstance(match, bytes):
        return match
    if not isinstance(match, str):
        raise ConfigurationError(f"match must be a str or bytes glob, got {type(match).__name__}")
    try:
        return match.encode()
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"match pattern {match!r} cannot be encoded as UTF-8 ({exc.reason}); "
            "pass it as bytes (os.fsencode turns a file-system str back into its bytes)"
        ) from None
