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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .. import _pipeline as pipeline
from .._write import raise_refusals
from ..errors import (
    MalformedEnvelope,
    OutcomeUnknownError,
    RepairError,
    ShardError,
    StampedeError,
)
from ..results import RepairAction, RepairOutcome
from ..topology._base import carried
from ..topology._floor import FLOOR_ELSEWHERE, client_named, raise_floor
from ..topology._guard import CAS, KEPT
from ..topology._guard import EXPIRED as EXPIRED_CODE
from ..topology._lane import LOST
from ..topology._retries import watch_losses
from ..typing import RepairContext
from ..verdict import Mode, Observation, Reason, Status, judge
from ..wire import (
    Envelope,
    commit_key,
)
from ..wire import encode_commit as encode_commit
from ._expiry import CHANGED as CHANGED
from ._expiry import EXPIRED as EXPIRED
from ._expiry import expiry_of as expiry_of
from ._expiry import grace_expiry as grace_expiry
from ._expiry import kept_expiry as kept_expiry
from ._expiry import kept_payloads_expiry as kept_payloads_expiry
from ._expiry import write_expiry as write_expiry
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
    with unknown_when_lost(obs, "compare-and-set"):
        results = await asyncio.gather(
            *(ctx.topology.script(CAS, keys, args(keys)) for keys in calls)
        )
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


@contextmanager
def unknown_when_lost(obs: Observation, what: str) -> Iterator[None]:
    """A repair's write that fails with a `ShardError` after a reply was lost (it was
    resent, as it is idempotent, and lost every reply, or timed out) may have landed
    all the same: `OutcomeUnknownError` naming the repair's `what` and the group,
    never the bare error of a shard that looks like it was never reached."""
    with watch_losses() as lost:
        try:
            yield
        except ShardError as exc:
            if not lost.count and not isinstance(exc.__cause__, LOST):
                raise  # (never sent: a shard that could not be reached)
            group = obs.group.decode("utf-8", "backslashreplace")
            unknown = OutcomeUnknownError(
                f"the repair's {what} of group {group!r}", shard=exc.shard, cause=exc
            )
            unknown.args = (
                f"the repair's {what} of group {group!r} on shard {exc.shard}: its reply was "
                f"lost ({exc}); it may or may not have been applied (never twice: a resend "
                "finds what it wrote and changes nothing). Read the group again to find out.",
            )
            raise unknown from exc


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
        with unknown_when_lost(obs, "commit record"):
            done = await ctx.topology.write_guarded(
                [ckey], [record], version=version, token=token, expire_at_ms=at
            )
            error = done.first_error()
            if error is not None:
                raise error
        # (SAME: a resend found it written; EXPIRED: its instant, the data's, has passed:
        # gone with the data, as the compare-and-set's values went; not a lost race)
        code = done.results.get(ckey, KEPT)
        refuse_record(obs, ckey, code, wrote=True)
        if code == KEPT:
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
    """Commit mode: if the data is one whole write whose record is missing or older,
    write its record; else None.

    The record is that write's own (same stamp, same keys): a late copy of it is
    the same bytes. It expires with the data. A delete is no such write: it reads
    `not_found` with or without its record, and a read-through (`fills_missing`)
    of it asks the source instead.
    """
    if obs.mode is not Mode.COMMIT or obs.errors:
        return None
    envs = obs.envelopes
    first = envs[0] if envs else None
    if first is None or first.tombstone or any(e is None or e.token != first.token for e in envs):
        return None
    record = obs.commit()
    if record is not None and (record.version, record.token) >= (first.version, first.token):
        return None  # its own record (naming other keys), or a newer write's: not late
    payload = encode_commit(list(obs.keys))
    ckey = commit_key(obs.group)
    at = await write_expiry(ctx.topology, dict(zip(obs.keys, obs.raw, strict=True)))
    if at in (EXPIRED, CHANGED):  # the data expired, or a newer write replaced it
        return await after_lost_race(ctx, obs, reason)
    with unknown_when_lost(obs, "commit record"):
        outcome = await ctx.topology.write_guarded(
            [ckey],
            [Envelope(first.version, first.token, payload).encode()],
            version=first.version,
            token=first.token,
            expire_at_ms=at,
        )
        error = outcome.first_error()
        if error is not None:
            raise error
    code = outcome.results.get(ckey, KEPT)
    refuse_record(obs, ckey, code, wrote=False)
    if code in (KEPT, EXPIRED_CODE):
        # (a newer write's record; or the data's instant has passed: the group is gone)
        return await after_lost_race(ctx, obs, reason)
    return RepairOutcome(
        obs.group,
        RepairAction.ROLLED_FORWARD,
        reason,
        best_effort(obs),
        True,
        stamp=(first.version, first.token),
    )


def refuse_record(obs: Observation, ckey: bytes, code: int, *, wrote: bool) -> None:
    """`RepairError` when the guard refused the repair's commit record (`code`): the
    record key holds what the record cannot be ordered against (a version of the
    other kind, one no stampede write has, another type). The repair did not commit
    the group, and no newer write won: it is neither repaired nor a lost race. `wrote`:
    the repair's compare-and-set had already rewritten the keys."""
    if code >= KEPT or code == EXPIRED_CODE:
        return
    try:
        raise_refusals(obs.group, {ckey: code})
    except StampedeError as exc:
        refused = str(exc).split(": ", 1)[-1]
    else:  # (a code the guard does not give for one key: WITHHELD)
        refused = f"the guard answered {code}"
    done = (
        "its keys were rewritten under the repair's stamp, but reads judge the group "
        "uncommitted until its record can be written"
        if wrote
        else "nothing was written"
    )
    raise RepairError(
        obs.group,
        f"its commit record {ckey.decode('utf-8', 'backslashreplace')!r} was refused "
        f"({refused}); {done}",
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
