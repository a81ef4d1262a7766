"""The expiry a repair writes with: that of the write it completes (`kept_expiry`,
never longer than what it keeps: `kept_payloads_expiry`), and, for what it writes
new (tombstones, payloads over a delete, a group with no stamp), a window counted
from the server's clock (`grace_expiry`, `ttl_expiry`): the compare-and-set's past
PXAT deletes a key, so an instant from a worker clock behind would take the keys
away instead of writing them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from ..errors import ShardResponseError
from ..typing import RepairContext, Topology
from ..verdict import Observation
from ..wire import commit_key, expire_at

__all__ = [
    "CHANGED",
    "EXPIRED",
    "expiry_of",
    "grace_expiry",
    "kept_expiry",
    "kept_payloads_expiry",
    "ttl_expiry",
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
    newest stamp tell it (its commit record too); a group with no stamp gets the
    context's `ttl`. When every one of them has gone since the read (the write
    expired), `EXPIRED`: a repair never extends a write's life; when each now holds
    a newer write, `CHANGED` (whose expiry is not this write's). A delete has no life
    to keep (its tombstones' grace is no data's): payloads written over it (a
    `Refetch` the source says exists) are new data and get the context's `ttl` too.
    The write kept is the newest one some key holds: a commit record newer than
    every key vouches for data that is gone (it expired a tick before its record, or
    was deleted outside stampede; a commit-mode write's record lands after its data),
    and lends its remaining life to nothing.
    """
    stamps = [(k, (e.version, e.token)) for k, e in zip(obs.keys, obs.envelopes, strict=True) if e]
    if not stamps:
        return await ttl_expiry(ctx, obs.keys[0])
    newest = max(s for _, s in stamps)
    if any(e is not None and e.tombstone and (e.version, e.token) == newest for e in obs.envelopes):
        return await ttl_expiry(ctx, obs.keys[0])
    seen = dict(zip(obs.keys, obs.raw, strict=True))
    held = {k: seen[k] for k, s in stamps if s == newest}
    record = obs.commit()
    if record is not None and (record.version, record.token) == newest:
        held[commit_key(obs.group)] = obs.commit_raw
    return await write_expiry(ctx.topology, held)


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
    """PEXPIRETIME of `key` (on servers before 7.0, its PTTL from the server's clock,
    TIME on its shard, never the worker's); None when it has none, `missing` when the
    key does not exist."""
    try:
        at = int(await topology.execute(key, "PEXPIRETIME", key))
    except ShardResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        now_s, micros = await topology.execute(key, "TIME")
        left = int(await topology.execute(key, "PTTL", key))
        at = left if left < 0 else int(now_s) * 1000 + int(micros) // 1000 + left
    if at == -2:
        return missing
    return at if at > 0 else None


async def grace_expiry(ctx: RepairContext, key: bytes) -> int:
    """A repair's tombstones' expiry: the grace window from the server's clock (TIME
    on `key`'s shard), not the worker's: tombstones stamped by a worker clock behind
    by more than the grace would land expired, and keep no late older write out."""
    return await _from_server_clock(ctx, key, ctx.grace)


async def ttl_expiry(ctx: RepairContext, key: bytes) -> int | None:
    """The expiry of data a repair writes new (no write's life to keep: a group with
    no stamp, or payloads over a delete): the context's `ttl` (None: none) from the
    server's clock, as `grace_expiry`. From the worker's clock, behind by more than
    the ttl, the compare-and-set (whose past PXAT deletes) took the keys away."""
    if ctx.ttl is None:
        return None
    expire_at(ctx.ttl)  # (refused as a write's ttl is, before anything is read)
    return await _from_server_clock(ctx, key, ctx.ttl)


async def _from_server_clock(ctx: RepairContext, key: bytes, seconds: float) -> int:
    """`seconds` from now by the server's clock (TIME on `key`'s shard), in unix ms."""
    now_s, micros = await ctx.topology.execute(key, "TIME")
    return int(now_s) * 1000 + int(micros) // 1000 + max(1, round(seconds * 1000))
