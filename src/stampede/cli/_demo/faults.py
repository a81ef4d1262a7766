"""The faults the demo injects: writers that die between shards, and paused primaries."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from stampede._client import Stampede
from stampede.testing.node import RedisNode
from stampede.wire import Envelope, new_token

from .keyspace import Database, Entity, payloads
from .stats import Counters

__all__ = ["crash_write", "pause_primaries", "spans_shards"]


def spans_shards(st: Stampede, entity: Entity) -> bool:
    """True when the keys of `entity` live on more than one shard."""
    return len({st.topology.shard_of(k.encode()) for k in entity.keys}) > 1


async def crash_write(
    st: Stampede, entity: Entity, db: Database, rng: random.Random, counters: Counters
) -> None:
    """A writer that dies between shards: its new write reaches one shard's keys only.

    It committed the change to the database first (as a service does before it
    updates its cache), stamped the values, and sent them; the process "died"
    after the first shard acknowledged. That is exactly the call the writer makes
    for that shard (`Topology.write_guarded` with the write's stamp), minus the
    others, so the keys left behind hold the previous write and the group is torn.

    The guard keeps each replaced value for a grace window (`stampede._kept`), and
    within it a read returns the group's last whole write rather than seeing it
    torn. The demo plays a writer that died longer ago than that: its write keeps
    nothing (`keep_ms=0`, even when a paused primary applies it late), so readers
    detect the tear and repair it (and the final scan, which does not look at kept
    versions, agrees).
    """
    topology = st.topology
    by_shard: dict[str, list[bytes]] = {}
    for key in entity.keys:
        raw = key.encode()
        by_shard.setdefault(topology.shard_of(raw), []).append(raw)
    shard = rng.choice(sorted(by_shard))
    reached = by_shard[shard]
    values = payloads(entity, db.next_revision(entity.group), rng)
    db.put(entity.group, values)
    version = await st.versions.next_version(entity.group.encode(), topology)
    token = new_token()
    encoded = [Envelope(version, token, values[k.decode()]).encode() for k in reached]
    outcome = await topology.write_guarded(
        reached, encoded, version=version, token=token, keep_ms=0
    )
    error = outcome.first_error()
    if error is not None:
        raise error
    counters.crashes += 1
    counters.note(
        f"crash: {entity.group} reached {len(reached)} of {len(entity.keys)} keys "
        f"(shard {shard}), then its writer died"
    )


async def pause_primaries(
    nodes: Sequence[RedisNode],
    stop: asyncio.Event,
    counters: Counters,
    rng: random.Random,
    *,
    every: float,
    pause_for: float,
) -> None:
    """Until `stop`: every `every` seconds SIGSTOP one primary for `pause_for` seconds.

    A write whose keys include the paused primary times out there and lands
    elsewhere (a partial write); reads of its keys fail until it resumes. The
    node is always resumed, also when the task is cancelled.
    """
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=every)
            return
        except TimeoutError:
            pass
        node = rng.choice(list(nodes))
        node.pause()
        counters.pauses += 1
        counters.note(f"pause: primary {node.address} stopped answering for {pause_for:g}s")
        try:
            await asyncio.sleep(pause_for)
        finally:
            node.resume()
        counters.note(f"resume: primary {node.address} answers again")
