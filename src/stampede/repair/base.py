"""What a repair is given, what it returns, and the writes every strategy shares.

A repair *completes the newest write it saw*: it writes every key under that
write's own stamp (the newest (version, token) among the data and the commit
record), and it changes a key only if the key still holds exactly what the read
saw (compare-and-set, one Lua call per slot). So:

- a write that started after the read has a higher stamp and is never touched;
- the newest write, if it was still in flight, lands its remaining keys over the
  repair's (same stamp: the guard lets the real payload replace the derived one),
  and a key it reached first fails the compare-and-set and is left alone;
- if that writer died, the group is now whole under its stamp.

A group with no stamp at all gets version 0, below every real write. When a
compare-and-set fails anywhere the group is re-read and the outcome says
`lost_race`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from ..envelope import Envelope
from ..observe import observe_group
from ..topology.base import Topology
from ..topology.guard import CAS_SCRIPT, KEPT
from ..topology.node_ops import Script
from ..verdict import Mode, Observation, Reason, Status, Verdict, commit_key, judge
from ..versions import VersionSource
from ..writer import commit_payload, expire_at, new_token

__all__ = [
    "RepairAction",
    "RepairContext",
    "RepairOutcome",
    "RepairStrategy",
    "best_effort",
    "compare_and_set",
    "guarded_delete",
    "repair_stamp",
    "rewrite",
    "roll_forward",
]

_CAS = Script(CAS_SCRIPT)


class RepairAction(StrEnum):
    REWRITTEN = "rewritten"  # the whole group written again under one stamp
    ROLLED_FORWARD = "rolled_forward"  # data was whole: only the commit record was written
    DELETED = "deleted"  # the source of truth says the entity is gone
    ALREADY_CONSISTENT = "already_consistent"  # a re-read found nothing to do
    LOST_RACE = "lost_race"  # a newer write got in first; the group was re-read
    QUEUED = "queued"  # handed to the repair stream for the worker


@dataclass(frozen=True, slots=True)
class RepairContext:
    """Where and how a repair writes."""

    topology: Topology
    mode: Mode
    versions: VersionSource
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    """What a repair did, and the group's payloads afterwards.

    `consistent` is True when `values` are one whole write (repaired, rolled
    forward, or found consistent on a re-read); a queued repair returns the
    best-effort merge with `consistent` False.
    """

    group: bytes
    action: RepairAction
    reason: Reason | None
    values: dict[bytes, bytes | None]
    consistent: bool
    stamp: tuple[int, str] | None = None
    detail: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class RepairStrategy(Protocol):
    """Turns a torn observation into a whole group (or a queued job)."""

    @property
    def name(self) -> str: ...

    async def repair(
        self, ctx: RepairContext, obs: Observation, verdict: Verdict
    ) -> RepairOutcome: ...


def repair_stamp(obs: Observation) -> tuple[int, str]:
    """The newest stamp `obs` saw (data or commit record); (0, new token) if none."""
    newest = obs.newest()
    record = obs.commit()
    stamps = [(e.version, e.token) for e in (newest,) if e is not None]
    if record is not None:
        stamps.append((record.version, record.token))
    return max(stamps) if stamps else (0, new_token())


async def compare_and_set(
    ctx: RepairContext,
    obs: Observation,
    new: Mapping[bytes, bytes | None],
    expire_at_ms: int | None,
) -> bool:
    """Set (or, for None, delete) each key that still holds what `obs` saw; all done?"""
    seen = dict(zip(obs.keys, obs.raw, strict=True))
    by_slot: dict[int, list[bytes]] = {}
    for key in new:
        by_slot.setdefault(ctx.topology.slot_of(key), []).append(key)

    def args(keys: list[bytes]) -> list[Any]:
        out: list[Any] = [expire_at_ms or 0]
        for key in keys:
            was, value = seen.get(key), new[key]
            out += ["0" if was is None else "1", was or b"", "d" if value is None else "s"]
            out.append(value or b"")
        return out

    results = await asyncio.gather(
        *(ctx.topology.script(_CAS, keys, args(keys)) for keys in by_slot.values())
    )
    return all(r == 1 for res in results for r in res)


def best_effort(obs: Observation) -> dict[bytes, bytes | None]:
    """Each key's current payload (raw bytes for an unstamped value)."""
    return {
        key: (env.payload if env is not None else raw)
        for key, env, raw in zip(obs.keys, obs.envelopes, obs.raw, strict=True)
    }


async def reobserve(ctx: RepairContext, obs: Observation) -> Observation:
    """Read the group again, as the original read did."""
    return await observe_group(ctx.topology, obs.group, list(obs.keys), obs.mode)


async def after_lost_race(
    ctx: RepairContext, obs: Observation, reason: Reason | None
) -> RepairOutcome:
    """A newer write beat the repair somewhere: report what the group holds now."""
    fresh = await reobserve(ctx, obs)
    verdict = judge(fresh)
    whole = verdict.status in (Status.CONSISTENT, Status.NOT_FOUND)
    return RepairOutcome(
        obs.group,
        RepairAction.LOST_RACE,
        reason,
        best_effort(fresh),
        whole,
        stamp=None
        if verdict.envelope is None
        else (verdict.envelope.version, verdict.envelope.token),
    )


async def rewrite(
    ctx: RepairContext,
    obs: Observation,
    payloads: Mapping[bytes, bytes],
    reason: Reason | None,
) -> RepairOutcome:
    """Write every key under the newest seen stamp, each only if it is unchanged."""
    keys = list(obs.keys)
    version, token = repair_stamp(obs)
    at = expire_at(ctx.ttl)
    new: dict[bytes, bytes | None] = {
        k: Envelope(version, token, payloads[k]).encode() for k in keys
    }
    if not await compare_and_set(ctx, obs, new, at):
        return await after_lost_race(ctx, obs, reason)
    if obs.mode is Mode.COMMIT:
        record = Envelope(version, token, commit_payload(keys)).encode()
        ckey = commit_key(obs.group)
        done = await ctx.topology.write_guarded(
            [ckey], [record], version=version, token=token, expire_at_ms=at
        )
        error = done.first_error()
        if error is not None:
            raise error
        if done.results.get(ckey) == KEPT:
            return await after_lost_race(ctx, obs, reason)
    ctx.versions.observe(version)
    values: dict[bytes, bytes | None] = {k: payloads[k] for k in keys}
    return RepairOutcome(
        obs.group, RepairAction.REWRITTEN, reason, values, True, stamp=(version, token)
    )


async def roll_forward(
    ctx: RepairContext, obs: Observation, reason: Reason | None
) -> RepairOutcome | None:
    """Commit mode: if the data is one whole write, write its missing record; else None."""
    if obs.mode is not Mode.COMMIT or obs.errors:
        return None
    envs = obs.envelopes
    first = envs[0] if envs else None
    if first is None or any(e is None or e.token != first.token for e in envs):
        return None
    record = obs.commit()
    if record is not None and (record.version, record.token) > (first.version, first.token):
        return None  # a newer write has committed: its data has not landed yet
    payload = commit_payload(list(obs.keys))
    ckey = commit_key(obs.group)
    outcome = await ctx.topology.write_guarded(
        [ckey],
        [Envelope(first.version, first.token, payload).encode()],
        version=first.version,
        token=first.token,
    )
    if outcome.failed:
        error = outcome.first_error()
        assert error is not None
        raise error
    if outcome.results.get(ckey) == KEPT:
        return await after_lost_race(ctx, obs, reason)
    return RepairOutcome(
        obs.group,
        RepairAction.ROLLED_FORWARD,
        reason,
        best_effort(obs),
        True,
        stamp=(first.version, first.token),
    )


async def guarded_delete(
    ctx: RepairContext, obs: Observation, reason: Reason | None
) -> RepairOutcome:
    """Delete the group's keys (and record) that still hold what the read saw."""
    gone: dict[bytes, bytes | None] = dict.fromkeys(obs.keys)
    if not await compare_and_set(ctx, obs, gone, None):
        return await after_lost_race(ctx, obs, reason)
    if obs.mode is Mode.COMMIT and obs.commit_raw is not None:
        ckey = commit_key(obs.group)
        record_obs = Observation(obs.group, (ckey,), (obs.commit_raw,), Mode.STAMP)
        if not await compare_and_set(ctx, record_obs, {ckey: None}, None):
            return await after_lost_race(ctx, obs, reason)
    return RepairOutcome(obs.group, RepairAction.DELETED, reason, dict(gone), True)
