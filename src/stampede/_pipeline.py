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
from ._txn.sweep import complete_pending
from .results import RepairAction, RepairOutcome
from .typing import RepairContext, RepairStrategy, Topology
from .verdict import Mode, Observation, Status, Verdict, judge
from .wire import commit_key

__all__ = ["judge", "observe", "observe_many", "repair"]

_COMPLETE_ROUNDS = 4
"""How often a repair completes pending transactions and looks again before it gives
up for now (leaving the group to a later read or job) rather than restamp it."""


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
    asked, "read" or "worker").

    First, a transaction that is visible at a sibling but still pending at one of
    the group's keys is completed there (a repair never restamps a key over a
    transaction that has committed): if that makes the group whole, that is the
    repair. A transaction still committing at one of the keys leaves the group to
    it: nothing is written, and the outcome is `lost_race` (whole or not, as the
    group reads now), never a repair."""
    wrote = False
    for _ in range(_COMPLETE_ROUNDS):
        pending = await complete_pending(ctx.topology, obs.keys, grace=ctx.version_grace)
        wrote = wrote or pending.completed > 0
        if not (pending.completed or pending.undecided):
            break  # what the strategy gets holds no transaction pending at its keys
        fresh = await observe(ctx.topology, obs.group, obs.keys, obs.mode)
        now = judge(fresh)
        whole = now.status in (Status.CONSISTENT, Status.NOT_FOUND)
        if whole or pending.undecided:
            # whole now; or a transaction is still committing here: leave it alone
            outcome = _completed(fresh, now, verdict, whole, wrote, pending.undecided)
            metrics.repair(outcome.action.value, source)
            return outcome
        obs, verdict = fresh, now  # another transaction may have committed meanwhile
    else:  # transactions keep landing: this is no moment to restamp the group
        outcome = _completed(obs, verdict, verdict, False, wrote, ())
        metrics.repair(outcome.action.value, source)
        return outcome
    outcome = await strategy.repair(ctx, obs, verdict.exhausted())
    metrics.repair(outcome.action.value, source)
    if outcome.action is RepairAction.LOST_RACE:
        metrics.lost_race(source)
    return outcome


def _completed(
    obs: Observation,
    verdict: Verdict,
    was: Verdict,
    whole: bool,
    wrote: bool,
    undecided: Sequence[bytes],
) -> RepairOutcome:
    """The outcome of a repair that met a transaction: `rolled_forward` when completing
    it (`wrote`) made the group whole; otherwise `lost_race` (nothing repaired), whole
    or not as the group reads now, with the keys where a transaction is still
    committing named in `detail["undecided"]` (read the group again later)."""
    env = verdict.envelope
    values = {
        key: (e.value if e is not None else raw)
        for key, e, raw in zip(obs.keys, obs.envelopes, obs.raw, strict=True)
    }
    rolled = whole and wrote
    detail = {}
    if undecided:
        detail["undecided"] = ", ".join(k.decode("utf-8", "backslashreplace") for k in undecided)
    return RepairOutcome(
        obs.group,
        RepairAction.ROLLED_FORWARD if rolled else RepairAction.LOST_RACE,
        was.exhausted().reason,
        values,
        whole,
        stamp=None if env is None or not whole else (env.version, env.token),
        detail=detail,
    )
