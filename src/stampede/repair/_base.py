"""What a repair is given, what it returns, and the writes every strategy shares.

A repair writes under *its own stamp*: the version of the newest write it saw
(or the source of truth's own version, when the loader gives one) and a fresh
token ordered just after that write's. It changes a key only if the key still
holds exactly what the read saw (compare-and-set, one Lua call per slot), and it
keeps the expiry of the write it completes. So:

- a write that started after the read has a newer stamp and is never touched;
- a late or retried half of the write the repair replaced carries an older stamp
  than the repair's, so the guard keeps it out: a repaired group never mixes the
  repair's payloads with that writer's;
- two repairs racing each other have different tokens: if their compare-and-sets
  interleave across shards, the group reads torn (and is repaired again), never
  whole with halves of each;
- a delete (the source says the entity is gone) writes stamped tombstones that
  keep late older writes out for the grace period.

A group with no stamp at all gets version 0, below every real write. When a
compare-and-set fails anywhere the group is re-read and the outcome says
`lost_race`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from .. import _pipeline as pipeline
from ..errors import MalformedEnvelope, ShardResponseError
from ..results import RepairAction, RepairOutcome
from ..topology._base import carried
from ..topology._floor import FLOOR_ELSEWHERE, client_named, raise_floor
from ..topology._guard import CAS, KEPT, WRITTEN
from ..topology._guard import EXPIRED as EXPIRED_CODE
from ..typing import RepairContext, Topology
from ..verdict import Mode, Observation, Reason, Status, judge
from ..wire import (
    Envelope,
    commit_key,
    expire_at,
)
from ..wire import encode_commit as encode_commit
from ._stamp import orders_after as orders_after
from ._stamp import refuse_far_ahead
from ._stamp import repair_stamp as repair_stamp

__all__ = [
    "CHANGED",
    "EXPIRED",
    "best_effort",
    "compare_and_set",
    "expiry_of",
    "grace_expiry",
    "guarded_delete",
    "kept_expiry",
    "kept_payloads_expiry",
    "orders_after",
    "repair_stamp",
    "rewrite",
    "roll_forward",
    "write_expiry",
]


EXPIRED = 1
"""An expiry instant long past: what a repair writes with when the write it would keep
has already expired (the compare-and-set then deletes instead of writing)."""

CHANGED = 2
"""What `write_expiry` gives when every key of the write now holds a newer one: the
write's expiry cannot be learned (never taken from the newer write), and the repair
writes nothing (its compare-and-set would fail at those keys anyway)."""


async def kept_expiry(ctx: RepairContext, obs: Observation) -> int | None:
    """The absolute expiry (unix ms) of the newest write `obs` saw, to keep it.

    Every key of one write expires at the same instant, so the keys holding the
    newest stamp tell it; a group with no stamp gets the context's `ttl`. When
    every one of them has gone since the read (the write expired), `EXPIRED`: a
    repair never extends a write's life; when each now holds a newer write,
    `CHANGED` (whose expiry is not this write's). A delete has no life to keep (its
    tombstones' grace is no data's): payloads written over it (a `Refetch` the
    source says exists) are new data and get the context's `ttl` too.
    """
    seen = dict(zip(obs.keys, obs.raw, strict=True))
    stamps = [(k, (e.version, e.token)) for k, e in zip(obs.keys, obs.envelopes, strict=True) if e]
    record = obs.commit()
    if record is not None:
        ckey = commit_key(obs.group)
        seen[ckey] = obs.commit_raw
        stamps.append((ckey, (record.version, record.token)))
    if not stamps:
        return expire_at(ctx.ttl)
    newest = max(s for _, s in stamps)
    if any(e is not None and e.tombstone and (e.version, e.token) == newest for e in obs.envelopes):
        return expire_at(ctx.ttl)
    return await write_expiry(ctx.topology, {k: seen[k] for k, s in stamps if s == newest})


async def kept_payloads_expiry(ctx: RepairContext, obs: Observation) -> int | None:
    """The expiry of a repair that re-stamps each key's own payload (`NewestWins`
    without `rebuild`): that of the newest write (`kept_expiry`), or the earliest of
    the writes whose payloads it keeps, if earlier, so that no payload outlives the
    write it came from (an older payload with a ttl beside a newest write without
    one was written without expiry). A write whose keys have gone or changed since
    the read is left out: the compare-and-set fails there anyway."""
    newest = await kept_expiry(ctx, obs)
    if newest in (EXPIRED, CHANGED):
        return newest
    holders: dict[object, dict[bytes, bytes | None]] = {}
    for key, env, raw in zip(obs.keys, obs.envelopes, obs.raw, strict=True):
        if raw is not None:  # a value no write stamped: its own expiry
            holders.setdefault(key if env is None else (env.version, env.token), {})[key] = raw
    found = await asyncio.gather(*(write_expiry(ctx.topology, ks) for ks in holders.values()))
    known = [at for at in (newest, *found) if at is not None and at not in (EXPIRED, CHANGED)]
    return min(known) if known else None


async def write_expiry(topology: Topology, held: Mapping[bytes, bytes | None]) -> int | None:
    """The expiry instant of the write that the keys of `held` held when read (key ->
    the bytes read: one stamp): None when it has none. Only a key that still holds
    those bytes tells it (its expiry is read first, then its value: a key that held
    them on both sides held them between, as a key never goes back to an older
    stamp); `EXPIRED` when a key has gone since and none still holds them (the
    write expired), `CHANGED` when each holds a newer write now."""
    found = await asyncio.gather(*(_held_expiry(topology, k, was) for k, was in held.items()))
    kept = [at for at in found if at not in (EXPIRED, CHANGED)]
    if any(at is None for at in kept):
        return None
    if kept:
        return max(at for at in kept if at is not None)
    return EXPIRED if EXPIRED in found else CHANGED


async def _held_expiry(topology: Topology, key: bytes, was: bytes | None) -> int | None:
    """The expiry of `key` if it still holds `was` (None: none), else `EXPIRED` when it
    has gone, `CHANGED` when it holds something else."""
    at = await expiry_of(topology, key, missing=EXPIRED)
    now = await topology.execute(key, "GET", key)
    if now is None:
        return EXPIRED
    return at if now == was else CHANGED


async def expiry_of(topology: Topology, key: bytes, *, missing: int | None = None) -> int | None:
    """PEXPIRETIME of `key` (PTTL on servers before 7.0); None when it has none,
    `missing` when the key does not exist."""
    try:
        at = int(await topology.execute(key, "PEXPIRETIME", key))
    except ShardResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        left = int(await topology.execute(key, "PTTL", key))
        at = left if left < 0 else time.time_ns() // 1_000_000 + left
    if at == -2:
        return missing
    return at if at > 0 else None


async def compare_and_set(
    ctx: RepairContext,
    obs: Observation,
    new: Mapping[bytes, bytes | None],
    expire_at_ms: int | None,
) -> bool:
    """Set (or, for None, delete) each key that still holds what `obs` saw; all done?
    Carried to its end (`carried`) even when the caller is cancelled (a read past its
    deadline): a key set gets its floor raised before the cancellation goes on."""
    return await carried(_compare_and_set(ctx, obs, new, expire_at_ms))


async def _compare_and_set(
    ctx: RepairContext,
    obs: Observation,
    new: Mapping[bytes, bytes | None],
    expire_at_ms: int | None,
) -> bool:
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

    calls = list(by_slot.values())
    results = await asyncio.gather(*(ctx.topology.script(CAS, keys, args(keys)) for keys in calls))
    for keys, codes in zip(calls, results, strict=True):
        for key, code in zip(keys, codes, strict=True):
            value = new[key]
            if value is not None and (
                code == FLOOR_ELSEWHERE or (code == 1 and client_named(ctx.topology, key))
            ):
                # set, with its version hash out of the call's reach (topology._floor)
                try:
                    env = Envelope.decode(value, key=key)
                except MalformedEnvelope:
                    continue  # no stamp: no floor to raise
                await raise_floor(ctx.topology, key, env.version, env.token)
    return all(r in (1, FLOOR_ELSEWHERE) for res in results for r in res)


def best_effort(obs: Observation) -> dict[bytes, bytes | None]:
    """Each key's current payload (None when missing or deleted; raw bytes for an
    unstamped value)."""
    return {
        key: (env.value if env is not None else raw)
        for key, env, raw in zip(obs.keys, obs.envelopes, obs.raw, strict=True)
    }


async def reobserve(ctx: RepairContext, obs: Observation) -> Observation:
    """Read the group again, as the original read did."""
    return await pipeline.observe(ctx.topology, obs.group, obs.keys, obs.mode)


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
    payloads: Mapping[bytes, bytes | None],
    reason: Reason | None,
    *,
    source_version: int | None = None,
    expire_at_ms: int | None = None,
) -> RepairOutcome:
    """Write every key under the repair's own stamp, each only if it is unchanged.

    A payload of None writes a tombstone. The expiry is `expire_at_ms` when given
    (a delete's grace), else that of the newest write seen.
    """
    keys = list(obs.keys)
    version, token = repair_stamp(obs, source_version)
    if version != source_version:
        refuse_far_ahead(ctx, obs, version)
    at = expire_at_ms if expire_at_ms is not None else await kept_expiry(ctx, obs)
    if all(payloads[k] is None for k in keys):
        at = await _outlasting_delete(ctx, obs, at)
    if at == CHANGED:  # a newer write replaced the one to complete: it won the race
        return await after_lost_race(ctx, obs, reason)
    new: dict[bytes, bytes | None] = {
        k: Envelope(version, token, payloads[k] or b"", tombstone=payloads[k] is None).encode()
        for k in keys
    }
    if not await compare_and_set(ctx, obs, new, at) or at == EXPIRED:
        # (expired: the keys that held what the read saw were set to expire at once,
        # and the group reads as it is now: gone, or what a newer write left)
        return await after_lost_race(ctx, obs, reason)
    if obs.mode is Mode.COMMIT:
        record = Envelope(version, token, encode_commit(keys)).encode()
        ckey = commit_key(obs.group)
        done = await ctx.topology.write_guarded(
            [ckey], [record], version=version, token=token, expire_at_ms=at
        )
        error = done.first_error()
        if error is not None:
            raise error
        # (SAME: a resend found it written; EXPIRED: its instant, the data's, has passed:
        # gone with the data, as the compare-and-set's values went; not a lost race)
        code = done.results.get(ckey, KEPT)
        if code < WRITTEN and code != EXPIRED_CODE:
            return await after_lost_race(ctx, obs, reason)
    ctx.versions.observe(version)
    deleted = all(payloads[k] is None for k in keys)
    values: dict[bytes, bytes | None] = {k: payloads[k] for k in keys}
    return RepairOutcome(
        obs.group,
        RepairAction.DELETED if deleted else RepairAction.REWRITTEN,
        reason,
        values,
        True,
        stamp=(version, token),
    )


async def _outlasting_delete(ctx: RepairContext, obs: Observation, at: int | None) -> int | None:
    """The expiry of a repair's tombstones: `at`, or the expiry of the newest write seen
    when that is a delete whose tombstones live longer (given a longer grace than the
    repair's): a repair never shortens what keeps a delayed older write out."""
    newest = obs.newest()
    if newest is None or not newest.tombstone or at is None:
        return at
    stamp = (newest.version, newest.token)
    held = {
        k: raw
        for k, e, raw in zip(obs.keys, obs.envelopes, obs.raw, strict=True)
        if e is not None and (e.version, e.token) == stamp
    }
    theirs = await write_expiry(ctx.topology, held)
    if theirs is None or theirs in (EXPIRED, CHANGED):
        return at
    return max(at, theirs)


async def roll_forward(
    ctx: RepairContext, obs: Observation, reason: Reason | None
) -> RepairOutcome | None:
    """Commit mode: if the data is one whole write, write its missing record; else None.

    The record is that write's own (same stamp, same keys): a late copy of it is
    the same bytes. It expires with the data.
    """
    if obs.mode is not Mode.COMMIT or obs.errors:
        return None
    envs = obs.envelopes
    first = envs[0] if envs else None
    if first is None or any(e is None or e.token != first.token for e in envs):
        return None
    record = obs.commit()
    if record is not None and (record.version, record.token) > (first.version, first.token):
        return None  # a newer write has committed: its data has not landed yet
    payload = encode_commit(list(obs.keys))
    ckey = commit_key(obs.group)
    at = await write_expiry(ctx.topology, dict(zip(obs.keys, obs.raw, strict=True)))
    if at in (EXPIRED, CHANGED):  # the data expired, or a newer write replaced it
        return await after_lost_race(ctx, obs, reason)
    outcome = await ctx.topology.write_guarded(
        [ckey],
        [Envelope(first.version, first.token, payload).encode()],
        version=first.version,
        token=first.token,
        expire_at_ms=at,
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
    ctx: RepairContext,
    obs: Observation,
    reason: Reason | None,
    *,
    source_version: int | None = None,
) -> RepairOutcome:
    """Tombstone the group's keys (and record) that still hold what the read saw.

    An entity that is gone has no version of its own: the source's version orders
    the delete only when it is newer than every stamp seen; otherwise the delete is
    ordered just after the newest (as for a source without versions), never refused.
    """
    gone: dict[bytes, bytes | None] = dict.fromkeys(obs.keys)
    if not orders_after(obs, source_version):
        source_version = None
    return await rewrite(
        ctx,
        obs,
        gone,
        reason,
        source_version=source_version,
        expire_at_ms=await grace_expiry(ctx, obs.keys[0]),
    )


async def grace_expiry(ctx: RepairContext, key: bytes) -> int:
    """A repair's tombstones' expiry: the grace window from the server's clock (TIME
    on `key`'s shard), not the worker's: tombstones stamped by a worker clock behind
    by more than the grace would land expired, and keep no late older write out."""
    seconds, micros = await ctx.topology.execute(key, "TIME")
    return int(seconds) * 1000 + int(micros) // 1000 + max(1, round(ctx.grace * 1000))
