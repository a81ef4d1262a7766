"""observe -> judge -> repair: the one pipeline behind reads, the worker and scan.

- `observe` / `observe_many`: every key of one group (or of many groups), and in
  commit mode each group's record, in one round trip per shard;
- `judge` (from `stampede.verdict`) turns an observation into a verdict;
- `repair` hands a group that stays torn to a strategy and counts what it did.

The reader adds retries and kept versions around these steps, the worker adds
its queue, scan its report; none of them observes, judges or repairs another way.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import metrics
from .results import RepairAction, RepairOutcome
from .typing import RepairContext, RepairStrategy, Topology
from .verdict import Mode, Observation, Verdict, judge
from .wire import commit_key

__all__ = ["judge", "observe", "observe_many", "repair"]


async def observe(
    topology: Topology, group: bytes, keys: Sequence[bytes], mode: Mode
) -> Observation:
    """One round trip per shard: every key, and in commit mode the commit record."""
    if mode is Mode.COMMIT:
        raw = await topology.fetch([*keys, commit_key(group)])
        return Observation(group, tuple(keys), tuple(raw[:-1]), mode, raw[-1])
    raw = await topology.fetch(keys)
    return Observation(group, tuple(keys), tuple(raw), mode, None)


async def observe_many(
    topology: Topology, groups: Sequence[tuple[bytes, Sequence[bytes]]], mode: Mode
) -> list[Observation]:
    """Many groups in one fetch (still one round trip per shard); records in commit mode."""
    commit = mode is Mode.COMMIT
    flat: list[bytes] = []
    for group, keys in groups:
        flat.extend(keys)
        if commit:
            flat.append(commit_key(group))
    raw = await topology.fetch(flat)
    out: list[Observation] = []
    pos = 0
    for group, keys in groups:
        values = tuple(raw[pos : pos + len(keys)])
        pos += len(keys)
        record = None
        if commit:
            record = raw[pos]
            pos += 1
        out.append(Observation(group, tuple(keys), values, mode, record))
    return out


async def repair(
    strategy: RepairStrategy,
    ctx: RepairContext,
    obs: Observation,
    verdict: Verdict,
    *,
    source: str,
) -> RepairOutcome:
    """Hand a torn observation to `strategy` and count what it did (`source`: who
    asked, "read" or "worker")."""
    outcome = await strategy.repair(ctx, obs, verdict.exhausted())
    metrics.repair(outcome.action.value, source)
    if outcome.action is RepairAction.LOST_RACE:
        metrics.lost_race(source)
    return outcome
