"""Counting keys per slot with SCAN, shard by shard, for live slot analysis (the
fallback when the server has no CLUSTER SLOT-STATS)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._analysis import tag_of
from ._slotmap import SlotMap
from ._slots import SLOTS, HashPolicy, hash_tag

if TYPE_CHECKING:
    from ..typing import Topology

__all__ = ["TAG_SUMMARY_SIZE", "ScanProgress", "Tally", "by_scan", "sample_tags", "scan_shard"]

_IDENTITY = b"stampede:shard"
"""The shard identity record each independent primary holds (see stampede.topology)."""

TAG_SUMMARY_SIZE = 8
"""Distinct tags tracked per slot while scanning (Misra-Gries): counts are exact
while a slot has at most this many tags; otherwise every tag holding more than
1/(SIZE+1) of the slot's tagged keys is still listed, with a lower-bound count."""


@dataclass(frozen=True, slots=True)
class ScanProgress:
    """Where a live analysis stands, passed to the `progress` callback after each batch."""

    shard: str
    """The primary the batch came from."""
    keys: int
    """Keys this primary has returned so far."""
    done: bool
    """True once this primary's walk is finished."""
    total_keys: int
    """Keys returned so far by all primaries together."""
    shards_done: int
    shards: int


class Tally:
    """Per-slot key counts, first key per slot, and per-slot tag summaries (a tag is
    the part hashed instead of the whole key: `policy`'s rule, else the hash tag)."""

    def __init__(self, slot_of: Callable[[bytes], int], policy: HashPolicy | None = None) -> None:
        self.slot_of = slot_of
        self.policy = policy
        self.counts = [0] * SLOTS
        self.examples: dict[int, bytes] = {}
        self.tags: dict[int, dict[bytes, int]] = {}
        self.tagged = 0
        self.seen = 0

    def add(self, key: bytes, slot: int) -> None:
        counts = self.counts
        if not counts[slot]:
            self.examples[slot] = key
        counts[slot] += 1
        self.seen += 1
        tag = tag_of(key, self.policy)
        if tag is None:
            return
        self.tagged += 1
        summary = self.tags.setdefault(slot, {})
        if tag in summary:
            summary[tag] += 1
        elif len(summary) < TAG_SUMMARY_SIZE:
            summary[tag] = 1
        else:  # Misra-Gries: every tracked count drops by one, zeros leave
            for other in list(summary):
                summary[other] -= 1
                if not summary[other]:
                    del summary[other]


async def scan_shard(
    topology: Topology,
    shard: str,
    *,
    match: bytes | None,
    count: int,
    on_batch: Callable[[str, Sequence[bytes], bool], None],
) -> None:
    args: list[Any] = ["COUNT", count]
    if match is not None:
        args += ["MATCH", match]
    cursor: Any = b"0"
    while True:
        reply = await topology.execute_on(shard, "SCAN", cursor, *args)
        cursor, keys = reply[0], list(reply[1])
        done = int(cursor) == 0
        on_batch(shard, keys, done)
        if done:
            return


async def by_scan(
    topology: Topology,
    names: tuple[str, ...],
    slot_map: SlotMap,
    *,
    match: bytes | None,
    count: int,
    progress: Callable[[ScanProgress], None] | None,
) -> tuple[Tally, dict[str, int]]:
    policy = getattr(topology, "policy", None)  # client-side shards may hash by a policy
    tally = Tally(topology.slot_of, policy if isinstance(policy, HashPolicy) else None)
    index = {name: i for i, name in enumerate(names)}
    per_shard: Counter[str] = Counter()
    misplaced: Counter[str] = Counter()
    finished: set[str] = set()
    primaries = list(topology.shard_names)

    def on_batch(shard: str, keys: Sequence[bytes], done: bool) -> None:
        here = index.get(shard)
        slot_of = tally.slot_of
        for key in keys:
            if key == _IDENTITY:  # one per primary, whatever its slot: not a user key
                continue
            slot = slot_of(key)
            tally.add(key, slot)
            if here is not None and slot_map.shard_of(slot) != here:
                misplaced[shard] += 1
        per_shard[shard] += sum(1 for k in keys if k != _IDENTITY)
        if done:
            finished.add(shard)
        if progress is not None:
            progress(
                ScanProgress(
                    shard=shard,
                    keys=per_shard[shard],
                    done=done,
                    total_keys=tally.seen,
                    shards_done=len(finished),
                    shards=len(primaries),
                )
            )

    await asyncio.gather(
        *(
            scan_shard(topology, shard, match=match, count=count, on_batch=on_batch)
            for shard in primaries
        )
    )
    return tally, dict(misplaced)


async def sample_tags(
    topology: Topology, shard: str, slot: int, sample: int
) -> tuple[tuple[tuple[bytes, int], ...], bytes | None]:
    keys = await topology.execute_on(shard, "CLUSTER", "GETKEYSINSLOT", slot, sample)
    tags = Counter(tag for tag in map(hash_tag, keys) if tag is not None)
    return tuple(tags.most_common(TAG_SUMMARY_SIZE)), (keys[0] if keys else None)
