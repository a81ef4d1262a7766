"""One observation of a group: every key, and in commit mode its record, in one round."""

from __future__ import annotations

from collections.abc import Sequence

from .topology.base import Topology
from .verdict import Mode, Observation
from .wire import commit_key

__all__ = ["observe_group"]


async def observe_group(
    topology: Topology, group: bytes, keys: Sequence[bytes], mode: Mode
) -> Observation:
    """One round trip per shard: every key, and in commit mode the commit record."""
    if mode is Mode.COMMIT:
        raw = await topology.fetch([*keys, commit_key(group)])
        return Observation(group, tuple(keys), tuple(raw[:-1]), mode, raw[-1])
    raw = await topology.fetch(keys)
    return Observation(group, tuple(keys), tuple(raw), mode, None)
