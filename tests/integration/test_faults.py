"""Shard failures during writes: named in the error, detected on the next read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stampede import PartialWriteError, RetryPolicy, ShardTimeout, TornReadError, WriteTimeout

from ..support import open_stampede, spread_keys

QUICK = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.005, deadline=30.0)


def node_named(env: Any, name: str) -> Any:
    return next(node for node in env.nodes if node.address == name)


async def test_paused_primary_times_out_naming_it(topology_env: tuple[str, Any]) -> None:
    """A paused primary fails a write with WriteTimeout naming it; what landed reads partial."""
    kind, env = topology_env
    async with open_stampede(env, kind) as st:
        keys = spread_keys(st, "paused")
        await st.write("paused", dict.fromkeys(keys, b"old"))
        victim = st.topology.shard_of(keys[0].encode())
        others = {k for k in keys if st.topology.shard_of(k.encode()) != victim}
        node = node_named(env, victim)
        node.pause()
        try:
            with pytest.raises(WriteTimeout) as info:
                await st.write("paused", dict.fromkeys(keys, b"new"))
            assert isinstance(info.value, TimeoutError | PartialWriteError)
            assert isinstance(info.value.cause, ShardTimeout)
            assert info.value.shard == victim and victim in str(info.value)
            assert {k.decode() for k in info.value.landed} == others
            # The paused process dies before it can apply its part of the write.
            node.kill()
        finally:
            node.restart()
            if kind == "cluster":
                env.wait_until_ok()
        await asyncio.sleep(0)
        with pytest.raises(TornReadError) as torn:
            await st.read("paused", keys, retry=QUICK)
        assert torn.value.reason == "partial"
        landed = {torn.value.seen[k] for k in others}
        assert len(landed) == 1 and None not in landed
