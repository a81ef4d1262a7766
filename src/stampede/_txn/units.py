"""Running a transaction script over (key, version hash) pairs, one call per unit
(`run_units`), the keys' version hashes (`sides_of`), and what a durable
transaction's calls acknowledged (`Acks`)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

from ..errors import ShardError
from ..options import Durability
from ..topology._base import call_units
from ..topology._durable import waits
from ..typing import Topology
from ..wire._txn import side_key

__all__ = ["Acks", "run_units", "sides_of"]

_SIDES_MAX = 65536
_SIDES: dict[bytes, tuple[weakref.ref[Topology], bytes]] = {}
"""Key -> (its topology, its version hash), for the keys transactions come back to."""


def sides_of(topology: Topology, keys: Sequence[bytes]) -> list[bytes]:
    """The version hash of each key (`side_key`), remembered per key with its topology
    (by weak reference: another topology's is worked out again)."""
    out: list[bytes] = []
    for key in keys:
        known = _SIDES.get(key)
        if known is not None and known[0]() is topology:
            out.append(known[1])
            continue
        side = side_key(key, topology.slot_of)
        if hasattr(topology, "__weakref__"):
            if len(_SIDES) >= _SIDES_MAX:
                _SIDES.clear()
            _SIDES[key] = (weakref.ref(topology), side)
        out.append(side)
    return out


async def run_units(
    topology: Topology,
    script: Any,
    keys: Sequence[bytes],
    sides: Sequence[bytes],
    args: Sequence[Sequence[Any]],
    *,
    head: Sequence[Any] = (),
    positions: Sequence[Sequence[int]] | None = None,
    acks: Acks | None = None,
) -> list[Any]:
    """Run `script` over (key, side) pairs, one call per unit, all at once.

    `args[p]` are the per-pair arguments of position p. Returns, per position, its
    reply entry, or the `ShardError` its call met. With `acks`, each call waits for
    replicas on its own connection, and `acks` records, per shard, the fewest that
    acknowledged a call there.
    """
    groups = positions if positions is not None else call_units(topology, keys)
    calls: list[tuple[list[bytes], list[Any]]] = []
    for group in groups:
        pairs: list[bytes] = []
        argv: list[Any] = [*head]
        for p in group:
            pairs += (keys[p], sides[p])
            argv += args[p]
        calls.append((pairs, argv))

    if acks is None:
        replies = await topology.scripts(script, calls)
    else:
        waited = acks

        async def durable(pairs: list[bytes], argv: list[Any]) -> Any:
            # the shard it goes to, named before it is sent: once it has run, a slot map
            # reloaded mid-failover may name no owner, and the reply must not be lost
            shard = topology.shard_of(pairs[0])
            reply, count = await topology.durable_script(script, pairs, argv, waited.then)
            waited.add(shard, count)
            return reply

        replies = await asyncio.gather(*(durable(*c) for c in calls), return_exceptions=True)
    out: list[Any] = [None] * len(keys)
    for group, reply in zip(groups, replies, strict=True):
        if isinstance(reply, BaseException) and not isinstance(reply, ShardError):
            raise reply
        for i, p in enumerate(group):
            out[p] = reply if isinstance(reply, ShardError) else reply[i]
    return out


class Acks:
    """What a durable transaction asked (`then`: the waits after each call) and, per
    shard, the fewest replicas that acknowledged one of its calls there."""

    def __init__(self, durability: Durability) -> None:
        self.wanted = durability.replicas
        wait_ms = max(1, round(durability.timeout * 1000))
        self.then = waits(durability.replicas, wait_ms, durability.aof)
        self.by_shard: dict[str, int] = {}

    def add(self, shard: str, count: int) -> None:
        self.by_shard[shard] = min(count, self.by_shard.get(shard, count))

    def short(self) -> dict[str, int]:
        """The shards that acknowledged fewer replicas than asked."""
        return {s: n for s, n in self.by_shard.items() if n < self.wanted}
