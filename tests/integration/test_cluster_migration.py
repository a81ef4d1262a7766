"""Stamped reads and writes through a live slot migration: ASK, MOVED and TRYAGAIN."""

from __future__ import annotations

import asyncio
import random

import pytest

import stampede
from stampede import RetryPolicy, Stampede, TornReadError, atomic, keyslot
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.sweep import sweep
from stampede._txn.units import run_units
from stampede.options import load_options
from stampede.results import GuardCode
from stampede.testing import LocalCluster, RedisProxy
from stampede.topology import Cluster
from stampede.topology._guard import GUARD, requests_for
from stampede.typing import GuardStamp
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import FAST, eventually, gone, open_stampede, raw_value

HOT = "{hot}"


def groups(n: int) -> dict[str, list[str]]:
    """Groups with one key in the hot slot and two keys elsewhere."""
    return {f"g{i}": [f"{HOT}:g{i}:a", f"g{i}:b", f"g{i}:c"] for i in range(n)}


async def write_all(st: Stampede, plan: dict[str, list[str]], value: bytes) -> set[str]:
    receipts = await asyncio.gather(
        *(st.write(g, dict.fromkeys(keys, value)) for g, keys in plan.items())
    )
    return {r.token for r in receipts}


async def read_all(st: Stampede, plan: dict[str, list[str]], value: bytes) -> None:
    """Read every group at once (so reads are batched per node) and check each is whole."""
    results = await asyncio.gather(*(st.read(g, keys) for g, keys in plan.items()))
    for result in results:
        assert result.consistent and set(result.values.values()) == {value}


async def test_reads_and_writes_follow_ask_then_moved(stampede_cluster: LocalCluster) -> None:
    """Mid-migration (keys split, ASK) and after it (MOVED) every group reads and writes whole."""
    slot = keyslot(HOT)
    plan = groups(20)
    async with open_stampede(stampede_cluster, "cluster") as st:
        await write_all(st, plan, b"v1")
        source = stampede_cluster.master_for_slot(slot)
        target = next(m for m in stampede_cluster.masters if m is not source)
        await asyncio.to_thread(stampede_cluster.begin_migration, slot, target)
        moved = [f"{HOT}:g{i}:a" for i in range(0, 20, 2)]
        await asyncio.to_thread(stampede_cluster.move_keys, slot, list(moved))
        # One batch of hot keys, half moved: the node must not answer nil for those.
        hot = [f"{HOT}:g{i}:a".encode() for i in range(20)]
        assert None not in await st.topology.fetch(hot)
        await read_all(st, plan, b"v1")  # half of the hot keys answer ASK
        await write_all(st, plan, b"v2")
        await read_all(st, plan, b"v2")
        await asyncio.to_thread(stampede_cluster.finish_migration, slot)
        assert stampede_cluster.master_for_slot(slot) is target
        await read_all(st, plan, b"v2")  # the old owner answers MOVED
        await write_all(st, plan, b"v3")
        await read_all(st, plan, b"v3")


async def test_workload_survives_a_live_migration(stampede_cluster: LocalCluster) -> None:
    """Writers and readers running while a slot migrates see no errors and end consistent."""
    slot = keyslot(HOT)
    plan = groups(12)
    names = list(plan)
    retry = RetryPolicy(attempts=20, base_delay=0.002, max_delay=0.05, deadline=2.0)
    async with open_stampede(stampede_cluster, "cluster") as st:
        await write_all(st, plan, b"start")
        stop = asyncio.Event()
        last: dict[str, bytes] = {}
        counts = {"writes": 0, "reads": 0, "torn": 0}

        async def writer(w: int) -> None:
            rng = random.Random(w)
            seq = 0
            while not stop.is_set():
                group = rng.choice(names)
                seq += 1
                value = f"w{w}-{seq}".encode()
                await st.write(group, dict.fromkeys(plan[group], value))
                counts["writes"] += 1

        async def reader(r: int) -> None:
            rng = random.Random(100 + r)
            while not stop.is_set():
                group = rng.choice(names)
                try:
                    result = await st.read(group, plan[group], retry=retry)
                except TornReadError:
                    counts["torn"] += 1
                    continue
                counts["reads"] += 1
                assert len(set(result.values.values())) == 1

        tasks = [asyncio.create_task(writer(i)) for i in range(5)]
        tasks += [asyncio.create_task(reader(i)) for i in range(5)]
        source = stampede_cluster.master_for_slot(slot)
        target = next(m for m in stampede_cluster.masters if m is not source)
        await asyncio.sleep(0.2)
        await asyncio.to_thread(stampede_cluster.migrate_slot, slot, target)
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks)
        assert counts["writes"] > 20 and counts["reads"] > 20, counts
        assert stampede_cluster.master_for_slot(slot) is target
        for group, keys in plan.items():
            result = await st.read(group, keys)
            assert result.consistent
            last[group] = next(iter(result.values.values())) or b""
        assert all(last.values())


@pytest.mark.parametrize("first", ["data key", "version hash"])
async def test_a_delete_mid_migration_over_a_pending_transaction_never_comes_back(
    stampede_cluster: LocalCluster, first: str
) -> None:
    """A transaction committed at b and still pending at a; a's slot migrates, and
    one of a's two keys (its data key, its version hash) has moved while the other
    has not when `st.delete` deletes a. The delete must still raise the floor of a's
    version hash wherever that hash is, so that once the tombstone expires neither a
    reader nor the sweep completes the older transaction at a: a deleted value never
    comes back."""
    async with open_stampede(
        stampede_cluster, "cluster", tombstone_grace=0.05, version_grace=0.05
    ) as st:
        a, b = "{mig}:a", "{other}:b"
        raw = [a.encode(), b.encode()]
        async with st.transaction() as tx:
            tx.set(a, b"old")
            tx.set(b, b"old")
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        sides = [side_key(k, st.topology.slot_of) for k in raw]
        env = b"%d:%s:new" % (version, token.encode())
        args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
        assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
        commit = [(version, token, 0)]
        assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]

        slot = keyslot(a)
        source = stampede_cluster.master_for_slot(slot)
        target = next(m for m in stampede_cluster.masters if m is not source)
        await asyncio.to_thread(stampede_cluster.begin_migration, slot, target)
        moved = raw[0] if first == "data key" else sides[0]
        await asyncio.to_thread(stampede_cluster.move_keys, slot, [moved])
        deleting = asyncio.ensure_future(st.delete("{mig}", [a]))
        if first == "version hash":  # the data key moves while the delete waits for it
            await asyncio.sleep(0)
        await asyncio.to_thread(stampede_cluster.finish_migration, slot)
        await deleting
        await gone(st, a)
        assert (await st.read_atomic([a, b])).values[a] is None
        await sweep(st.topology, grace=0.05)
        assert await raw_value(st, a) is None
        assert (await st.read_atomic([a, b])).values[a] is None


async def test_a_resent_write_mid_migration_still_raises_the_floor(
    stampede_cluster: LocalCluster,
) -> None:
    """A key's version hash has moved to the importing node, the key itself not yet:
    a guarded write on the exporting node cannot raise the floor there and leaves it
    to the client. When that call's reply is lost after it ran, the resend finds the
    write already there (SAME) and cannot reach the hash either: it says so (12), and
    the client raises the floor on the importing node (ASK)."""
    async with open_stampede(stampede_cluster, "cluster") as st:
        a, b = "{mig2}:a", "{other2}:b"
        async with st.transaction() as tx:  # a has a version hash
            tx.set(a, b"old")
            tx.set(b, b"old")
        raw = a.encode()
        side = side_key(raw, st.topology.slot_of)
        slot = keyslot(a)
        source = stampede_cluster.master_for_slot(slot)
        target = next(m for m in stampede_cluster.masters if m is not source)
        await asyncio.to_thread(stampede_cluster.begin_migration, slot, target)
        await asyncio.to_thread(stampede_cluster.move_keys, slot, [side])
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        value = b"%d:%s:new" % (version, token.encode())
        stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": 0}
        (request,) = requests_for([raw], [value], [[0]], (), stamp)
        # the first call ran on the exporting node, its reply lost: no floor raised
        assert await st.topology.script(GUARD, [raw], list(request.argv)) == [10]
        resent = await st.topology.write_guarded([raw], [value], **stamp)
        assert resent.results == {raw: GuardCode.SAME}
        floor = await st.topology.execute(side, "HGET", side, "g")
        assert floor == b"%d:%s" % (version, token.encode())
        await asyncio.to_thread(stampede_cluster.finish_migration, slot)


async def test_a_sweep_that_misses_a_pending_key_moved_mid_pass_keeps_the_evidence(
    stampede_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction with a TTL committed at x and still pending at y (its writer died
    between the two). While the sweep's first pass walks the nodes, y's slot moves
    from a node not yet scanned to one already scanned: the pass never sees y's
    version hash, so nothing rolls it forward, and the second pass collects x's. x's
    commit marks (the evidence that completes y) must still outlive its value: once
    the TTL has passed, the next sweep completes y, and y's older value, which the
    transaction replaced, is gone with it (it stayed, brought back)."""
    async with open_stampede(stampede_cluster, "cluster", version_grace=0.05) as st:
        names = st.topology.shard_names
        first = names[0]  # scanned first: y's hash arrives there once it was walked
        tags = (f"swept{i}" for i in range(10_000))
        y = next(f"{{{t}}}:y" for t in tags if st.topology.shard_of(f"{{{t}}}:y".encode()) != first)
        x = next(f"{{{t}}}:x" for t in tags if st.topology.shard_of(f"{{{t}}}:x".encode()) != first)
        raw = [x.encode(), y.encode()]
        async with st.transaction() as tx:  # the values before, with no expiry
            tx.set(x, b"old")
            tx.set(y, b"old")
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        sides = [side_key(k, st.topology.slot_of) for k in raw]
        seconds, micros = await st.topology.execute(raw[0], "TIME")
        at = int(seconds) * 1000 + int(micros) // 1000 + 3000
        env = b"%d:%s:new" % (version, token.encode())
        args = [(version, token, 0, at, env, encode_meta(raw))] * 2
        assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
        commit = [(version, token, at)]
        assert await run_units(st.topology, COMMIT, raw[:1], sides[:1], commit, head=[50]) == [1]

        slot = keyslot(y)
        source = st.topology.shard_of(raw[1])
        target = next(m for m in stampede_cluster.masters if m.address == first)
        scan = st.topology.execute_on
        moved: list[int] = []

        async def scan_moving(shard: str, *args: object) -> object:
            if shard == source and not moved:  # the first pass reaches y's node
                moved.append(slot)
                await asyncio.to_thread(stampede_cluster.migrate_slot, slot, target)
            return await scan(shard, *args)

        monkeypatch.setattr(st.topology, "execute_on", scan_moving)
        await sweep(st.topology, grace=0.05)
        monkeypatch.undo()
        assert moved and stampede_cluster.master_for_slot(slot) is target
        assert await raw_value(st, y) is not None  # pending there still: not seen
        await gone(st, x)  # the transaction's TTL has passed

        async def past_grace() -> bool:  # and the grace window after it, by the server
            seconds, micros = await st.topology.execute(raw[0], "TIME")
            return int(seconds) * 1000 + int(micros) // 1000 > at + 100

        await eventually(past_grace)
        await sweep(st.topology, grace=0.05)
        assert await raw_value(st, y) is None
        assert (await st.read_atomic([x, y])).values == {x: None, y: None}


async def test_a_multi_redirected_while_no_node_gives_the_slot_map_follows_moved(
    stampede_cluster: LocalCluster,
) -> None:
    """atomic.multi meets MOVED (its slot moved since the map was loaded) and reloads
    the map, but no node answers CLUSTER SLOTS: the reload's own error (a transport
    exception, no StampedeError) ended the call. The block goes to the owner MOVED
    named, once."""
    proxies = {}
    for node in stampede_cluster.masters:
        proxy = RedisProxy(node.address)
        await proxy.start()
        proxies[node.address] = proxy
    by_target = {f"{p.target[0]}:{p.target[1]}": p for p in proxies.values()}

    def remap(addr: tuple[str, int]) -> tuple[str, int]:
        proxy = by_target[f"{addr[0]}:{addr[1]}"]
        return proxy.host, proxy.port

    topology = Cluster(
        proxies[stampede_cluster.masters[0].address].url, options=FAST, address_remap=remap
    )
    try:
        await topology.open()
        st = Stampede(topology, options=load_options(None, {"connection": FAST}))
        key = "{multimoved}:n"
        slot = keyslot(key)
        source = stampede_cluster.master_for_slot(slot)
        target = next(m for m in stampede_cluster.masters if m is not source)
        await asyncio.to_thread(stampede_cluster.migrate_slot, slot, target)
        for proxy in proxies.values():  # no node gives the map any more
            proxy.drop_before_forward(lambda cmd: cmd[0].upper() == b"CLUSTER", times=None)
        assert await atomic.multi(st, [("INCR", key)]) == [1]
        assert await st.topology.execute(key.encode(), "GET", key) == b"1"
    finally:
        await topology.aclose()
        for proxy in proxies.values():
            await proxy.aclose()


async def test_transactions_wait_out_a_slot_migration(stampede_cluster: LocalCluster) -> None:
    """Mid-migration every writing MULTI/EXEC or WATCH transaction meets ASK (its
    operation marker is a new key, which the owner hands to the importing node), even
    over keys that did not move. It gave up after 16 quick tries (about 2 s) with
    ShardUnavailable; it now waits for the slot up to `failover_timeout`, and each
    applies once when the migration ends."""
    unmoved, moved = "{txmig}:unmoved", "{txmig}:moved"
    slot = keyslot(unmoved)
    source = stampede_cluster.master_for_slot(slot)
    target = next(m for m in stampede_cluster.masters if m is not source)
    client = source.client()
    client.mset({unmoved: b"1", moved: b"1"})
    opts = FAST.model_copy(update={"failover_timeout": 60.0})
    async with stampede.connect(stampede_cluster.url, cluster=True, connection=opts) as st:
        await asyncio.to_thread(stampede_cluster.begin_migration, slot, target)
        await asyncio.to_thread(stampede_cluster.move_keys, slot, [moved.encode()])

        def tries() -> int:
            stats = client.info("commandstats").get("cmdstat_watch", {})
            return int(stats.get("calls", 0)) + int(stats.get("rejected_calls", 0))

        before = tries()
        calls = asyncio.gather(
            atomic.multi(st, [("INCR", unmoved)]),
            atomic.watch(st, [moved], lambda tx: [("INCR", moved)]),
        )

        async def retried_past_the_old_limit() -> bool:
            assert not calls.done() or calls.exception() is None, calls.exception()
            return await asyncio.to_thread(tries) >= before + 2 * 20

        await eventually(retried_past_the_old_limit)
        await asyncio.to_thread(stampede_cluster.finish_migration, slot)
        replies, watched = await calls
        assert replies == [2] and watched.written and watched.results == [2]
    assert target.client().mget([unmoved, moved]) == [b"2", b"2"]
    client.close()
