"""The newest whole write of a group, found among the versions its keys kept.

Every guarded write that replaces an envelope keeps the replaced one for a short
while (`topology.guard`: at most four per key, newest first, for the grace
window). A group read that sees its newest write still in flight (some keys
have it, others an older write) fetches each key's current value and kept
versions in one round trip per shard and returns the newest write that every
key (and, in commit mode, the commit record) still has: the last whole state of
the group, instead of waiting for the in-flight write to finish. It never goes
below the oldest value a key holds now, so it never returns less than a write
acknowledged before the read began (a transaction's commit, which reaches only
the keys it writes, drops the kept versions of each: txn_commit_body.lua).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ._lua import script
from .errors import MalformedEnvelope, ShardError
from .topology._base import call_units
from .typing import Topology
from .verdict import Mode, Observation, Status, judge
from .wire import Envelope, commit_key

__all__ = ["KEPT_READ", "drop_kept", "kept_versions", "newest_whole"]

KEPT_READ = script("kept_read")
_DROP = script("kept_drop")


async def kept_versions(
    topology: Topology, keys: Sequence[bytes]
) -> list[tuple[bytes | None, list[bytes]]]:
    """Per key: its current value and its kept versions (newest first)."""
    groups = call_units(topology, keys)
    replies = await asyncio.gather(
        *(topology.script(KEPT_READ, [keys[p] for p in g], []) for g in groups)
    )
    out: list[Any] = [None] * len(keys)
    for group, reply in zip(groups, replies, strict=True):
        for p, entry in zip(group, reply, strict=True):
            out[p] = (entry[0], list(entry[1] or []))
    return out


async def drop_kept(topology: Topology, keys: Sequence[bytes | str]) -> int:
    """Forget the kept versions of `keys`, as if the grace window had passed.

    Tests use it to play a write that died long ago: the group then reads torn
    (and is repaired) at once instead of reading as its last whole write.
    """
    raw = [k.encode() if isinstance(k, str) else k for k in keys]
    groups = call_units(topology, raw)
    counts = await asyncio.gather(
        *(topology.script(_DROP, [raw[p] for p in g], []) for g in groups)
    )
    return int(sum(counts))


def _by_stamp(key: bytes, values: Sequence[bytes | None]) -> dict[tuple[int, str], bytes]:
    found: dict[tuple[int, str], bytes] = {}
    for raw in values:
        if raw is None:
            continue
        try:
            env = Envelope.decode(raw, key=key)
        except MalformedEnvelope:
            continue
        found.setdefault((env.version, env.token), raw)
    return found


async def newest_whole(topology: Topology, obs: Observation) -> Observation | None:
    """An observation of the newest write every key still has, or None if none is.

    Only writes at least as new as the oldest value a key holds now qualify: an
    older one could predate a write that was acknowledged before this read. The
    returned observation judges consistent (or not found, for a delete)."""
    keys = list(obs.keys)
    asked = [*keys, commit_key(obs.group)] if obs.mode is Mode.COMMIT else keys
    try:
        seen = await kept_versions(topology, asked)
    except ShardError:
        return None
    per_key = [_by_stamp(k, [cur, *kept]) for k, (cur, kept) in zip(asked, seen, strict=True)]
    # Every write acknowledged before this read reached every key (written, or kept
    # out by a newer one), so each key's current stamp is at least its stamp: a
    # candidate below the oldest current stamp could be older than such a write.
    current = [s for k, (cur, _) in zip(asked, seen, strict=True) for s in _by_stamp(k, [cur])]
    floor = min(current) if current else (0, "")
    candidates = sorted({s for found in per_key[: len(keys)] for s in found}, reverse=True)
    for stamp in candidates:
        if stamp < floor:
            break
        if not all(stamp in found for found in per_key):
            continue
        raws = tuple(found[stamp] for found in per_key[: len(keys)])
        record = per_key[-1][stamp] if obs.mode is Mode.COMMIT else None
        candidate = Observation(obs.group, tuple(keys), raws, obs.mode, record)
        if judge(candidate).status in (Status.CONSISTENT, Status.NOT_FOUND):
            return candidate
    return None
