"""Hot, healthy groups: writers that never fail, default options, no repair. A read of
a group whose newest write is in flight returns the newest whole write its keys kept,
so no read ends torn (before kept versions, about 0.5% of such reads did). A group
whose keys share one slot is written in one call, which no read sees in part: it
keeps nothing, and is never torn either."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest

import stampede
from stampede import RetryPolicy, Stampede, StampedeError, TornReadError

from ..support import open_stampede, spread_keys

WRITER = r"""
import asyncio, sys, stampede
async def main() -> None:
    cluster, urls, keys = sys.argv[1] == "cluster", sys.argv[2].split(","), sys.argv[3:]
    conn = stampede.connect(urls[0], cluster=True) if cluster else stampede.connect(urls)
    async with conn as st:
        n = 0
        async def loop(w: int) -> None:
            nonlocal n
            while True:
                n += 1
                await st.write("hot", {k: b"%d.%d" % (w, n) for k in keys})
        await asyncio.gather(*(loop(w) for w in range(4)))
asyncio.run(main())
"""


@pytest.mark.parametrize("layout", ["spread", "one slot"])
async def test_hot_group_reads_are_never_torn(topology_env: tuple[str, Any], layout: str) -> None:
    """2,000 reads of a group that two writer processes rewrite continuously: every
    read is whole (one write's values), none raises TornReadError. Spread over
    shards, the group's writes keep what they replace; in one slot, they keep none."""
    kind, env = topology_env
    urls = env.url if kind == "cluster" else ",".join(env.urls)
    async with open_stampede(env, kind) as st:
        keys = (
            spread_keys(st, "hot", 4) if layout == "spread" else [f"{{hot}}:{i}" for i in range(4)]
        )
        await st.write("hot", dict.fromkeys(keys, b"start"))
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        writers = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", WRITER, kind, urls, *keys, env=environ
            )
            for _ in range(2)
        ]
        try:
            torn = reads = 0

            async def reader() -> None:
                nonlocal torn, reads
                while reads < 2000:
                    reads += 1
                    try:
                        got = await st.read("hot", keys)
                    except TornReadError:
                        torn += 1
                        continue
                    assert got.consistent and len(set(got.values.values())) == 1

            before = await _writing(st, keys, writers)  # the writers are up and writing
            await asyncio.gather(*(reader() for _ in range(8)))
            assert torn == 0
            assert (await st.read("hot", keys)).version != before  # and wrote meanwhile
            kept = [
                f"{k}:stampede:p" if layout == "one slot" else f"{{{k}}}:stampede:p:u" for k in keys
            ]
            held = [await st.topology.execute(k.encode(), "EXISTS", k.encode()) for k in kept]
            assert held == ([0] * 4 if layout == "one slot" else [1] * 4)
        finally:
            for proc in writers:
                proc.kill()
                await proc.wait()


async def _writing(st: Stampede, keys: list[str], writers: list[Any]) -> int | None:
    """Once the group's version has changed three times (the writer processes are
    writing), the version read last."""
    seen = {(await st.read("hot", keys)).version}
    while len(seen) < 4:
        assert all(w.returncode is None for w in writers), "a writer process exited"
        seen.add((await st.read("hot", keys)).version)
        await asyncio.sleep(0.01)
    return (await st.read("hot", keys)).version


@pytest.mark.parametrize("layout", ["tagged", "spread"])
async def test_a_key_of_another_type_reads_as_missing_on_both_topologies(
    st: Stampede, layout: str
) -> None:
    """A key of a group holding a list (another program's) reads as missing, as MGET
    answers on independent shards: the group is torn (partial), not failed with the
    node's WRONGTYPE error on a cluster; and that node keeps its cross-slot read."""
    keys = ["w:{1}:a", "w:{1}:b"] if layout == "tagged" else spread_keys(st, "w", 2)
    await st.write("w:{1}" if layout == "tagged" else "w", dict.fromkeys(keys, b"x"))
    raw = keys[0].encode()
    await st.topology.execute(raw, "DEL", raw)
    await st.topology.execute(raw, "RPUSH", raw, b"theirs")
    group = "w:{1}" if layout == "tagged" else "w"
    with pytest.raises(TornReadError) as torn:
        await st.read(group, keys, retry=RetryPolicy(attempts=1, deadline=30.0))
    assert torn.value.observation is not None
    assert torn.value.observation.raw[0] is None
    io = getattr(st.topology, "_io", None)
    if io is not None:  # a cluster: the node still reads keys of many slots at once
        assert not io._no_read_script  # noqa: SLF001 - no public view of it


async def test_a_passing_refusal_keeps_the_cross_slot_guard(
    stampede_cluster: Any,
) -> None:
    """A node refusing the cross-slot guard for a passing reason (here `OOM`: its
    memory is full) keeps the one-call-per-node write once it recovers; only a node
    that cannot compile a flagged script at all (before Redis 7.0) loses it."""
    async with open_stampede(stampede_cluster, "cluster") as st:
        by_node: dict[str, list[str]] = {}
        for i in range(200):
            key = f"oom:{i}"
            by_node.setdefault(st.topology.shard_of(key.encode()), []).append(key)
        keys = next(ks for ks in by_node.values() if len(ks) >= 2)[:2]
        raw = keys[0].encode()
        await st.topology.execute(raw, "CONFIG", "SET", "maxmemory", "1")
        try:
            with pytest.raises(StampedeError, match="OOM"):
                await st.write("oom", dict.fromkeys(keys, b"x"))
        finally:
            await st.topology.execute(raw, "CONFIG", "SET", "maxmemory", "0")
        await st.write("oom", dict.fromkeys(keys, b"y"))
        assert (await st.read("oom", keys)).values == dict.fromkeys(keys, b"y")
        io = st.topology._io  # type: ignore[attr-defined]  # noqa: SLF001 - no public view
        assert not io._no_write_script  # noqa: SLF001


async def test_a_reader_that_may_not_run_scripts_reads_with_gets(stampede_cluster: Any) -> None:
    """A reader whose ACL allows reads but no scripts (`NOPERM` for EVALSHA): its
    group reads over many slots go as GETs, and after the first refusal straight
    away (the node is marked), not one refused script call per read."""
    rule = ["on", ">pw", "~*", "&*", "+@read", "+@connection", "+cluster", "+info"]
    for node in stampede_cluster.nodes:
        with node.client() as admin:
            admin.execute_command("ACL", "SETUSER", "reader", *rule)
    async with open_stampede(stampede_cluster, "cluster") as st:
        keys = spread_keys(st, "acl", 4)
        await st.write("acl", dict.fromkeys(keys, b"x"))
    url = stampede_cluster.url.replace("redis://", "redis://reader:pw@")
    try:
        async with stampede.connect(url, cluster=True) as reader:
            for _ in range(2):
                assert (await reader.read("acl", keys)).values == dict.fromkeys(keys, b"x")
            io = reader.topology._io  # type: ignore[attr-defined]  # noqa: SLF001 - no public view
            assert io._no_read_script  # noqa: SLF001
    finally:
        for node in stampede_cluster.nodes:
            with node.client() as admin:
                admin.execute_command("ACL", "DELUSER", "reader")
