"""Failover without an outage: a cluster client follows a promotion, startup nodes may
be down, and a replica is refused where a primary is needed. Real replicas, real
failovers (node timeout 1 s)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.exceptions import RedisError

import stampede
from stampede import (
    ConfigurationError,
    Durability,
    RetryPolicy,
    SetupError,
    ShardError,
    ShardUnavailable,
    Stampede,
    TransactionAborted,
)
from stampede.atomic import multi
from stampede.keys import keyslot
from stampede.options import ConnectOptions
from stampede.testing import LocalCluster, RedisNode, RedisProxy
from stampede.testing._admin import command

from ..support import caught_up, eventually

pytestmark = pytest.mark.timeout(180)  # real elections, on a machine that may be busy

FAILOVER = ConnectOptions(
    socket_timeout=1.0, connect_timeout=0.5, connection_retries=1, failover_timeout=30.0
)


@pytest.fixture
def replicated() -> Iterator[LocalCluster]:
    """Three masters with a replica each, node timeout 1 s (a fresh cluster per test:
    each test kills a master)."""
    cluster = LocalCluster(3, replicas=1, extra_args=["--cluster-node-timeout", "1000"])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def st(replicated: LocalCluster) -> AsyncIterator[Stampede]:
    """A client given every master's URL as startup nodes."""
    async with stampede.connect(
        [m.url for m in replicated.masters], cluster=True, connection=FAILOVER
    ) as client:
        yield client


async def test_a_client_open_before_a_master_dies_writes_after_the_promotion(
    replicated: LocalCluster, st: Stampede
) -> None:
    """The master of a group's slot is killed: the same open client's next write waits
    through the election (map reloads from the nodes still up) and lands on the promoted
    replica; reads follow, and nothing was lost of what the replica had."""
    group = "fo:{1}"
    keys = [f"{group}:a", f"{group}:b"]
    await st.write(group, dict.fromkeys(keys, b"before"))
    victim = replicated.master_for_slot(keyslot(keys[0]))
    caught_up(victim)  # the replica has the write
    before = st.topology.shard_of(keys[0].encode())
    victim.kill()
    receipt = await st.write(group, dict.fromkeys(keys, b"after"))
    assert receipt.keys and st.topology.shard_of(keys[0].encode()) != before
    got = await st.read(group, keys)
    assert got.consistent and got.values == dict.fromkeys(keys, b"after")


async def test_multi_after_a_failover_goes_to_the_promoted_replica(
    replicated: LocalCluster,
) -> None:
    """MULTI/EXEC is not resent, but one that met the dead master reloads the slot map:
    once the replica is promoted, `multi()` lands there again, even with no periodic
    reload (it kept going to the dead master's address)."""
    options = FAILOVER.model_copy(update={"refresh_interval": 0.0})
    urls = [m.url for m in replicated.masters]
    async with stampede.connect(urls, cluster=True, connection=options) as st:
        key = "fm:{1}:n"
        assert await multi(st, [("INCR", key)]) == [1]
        victim = replicated.master_for_slot(keyslot(key))
        caught_up(victim)  # the replica has the count
        victim.kill()

        async def promoted() -> bool:
            with contextlib.suppress(LookupError, RedisError, OSError):
                owner = await asyncio.to_thread(replicated.master_for_slot, keyslot(key))
                return owner is not victim
            return False

        await eventually(promoted, within=60.0)
        counted: list[int] = []

        async def lands() -> bool:
            try:
                counted.extend(await multi(st, [("INCR", key)]))
            except ShardError:
                return False
            return True

        await eventually(lands, within=30.0)
        assert counted == [2]


async def test_ping_after_a_failover_reaches_the_promoted_replica(
    replicated: LocalCluster,
) -> None:
    """A readiness check (`ping`, which the worker's /healthz and the sweep's SCANs go
    through too: `execute_on`) that met the dead master reloads the slot map: once the
    replica is promoted, `ping` is ok again and names it, even with no periodic reload
    (it kept reporting the dead master down)."""
    options = FAILOVER.model_copy(update={"refresh_interval": 0.0})
    urls = [m.url for m in replicated.masters]
    async with stampede.connect(urls, cluster=True, connection=options) as st:
        assert (await st.ping()).ok
        victim = replicated.masters[0]
        victim.kill()

        async def promoted() -> bool:
            with contextlib.suppress(LookupError, RedisError, OSError):
                owner = await asyncio.to_thread(replicated.master_for_slot, 0)
                return owner is not victim
            return False

        await eventually(promoted, within=60.0)
        owner = await asyncio.to_thread(replicated.master_for_slot, 0)

        async def ready() -> bool:
            return (await st.ping(within=1.0)).ok

        await eventually(ready, within=30.0)
        assert owner.address in (await st.ping()).latency


async def test_a_primary_demoted_by_a_failover_is_unavailable_not_misconfigured(
    replicated: LocalCluster, st: Stampede
) -> None:
    """A name taken from `shard_names` before a `CLUSTER FAILOVER` (a scan's, the
    sweep's) names a replica once the map is reloaded: `execute_on` raises
    `ShardUnavailable` saying so (it raised `ConfigurationError`, "no cluster primary
    named", as for a name the caller made up, which it still does)."""
    group, key = "fd:{1}", "fd:{1}:a"
    await st.write(group, {key: b"before"})
    old = st.topology.shard_of(key.encode())
    victim = replicated.master_for_slot(keyslot(key))
    replica = next(n for n in replicated.replicas if int(command(n, "ROLE")[2]) == victim.port)
    command(replica, "CLUSTER", "FAILOVER")

    async def moved() -> bool:
        await st.write(group, {key: b"after"})  # a MOVED reloads the map
        return old not in st.topology.shard_names

    await eventually(moved, within=60.0)
    with pytest.raises(ShardUnavailable, match="no longer a primary"):
        await st.topology.execute_on(old, "PING")
    with pytest.raises(ConfigurationError, match="no cluster primary named"):
        await st.topology.execute_on("127.0.0.1:1", "PING")


async def test_reads_wait_through_the_election_too(replicated: LocalCluster, st: Stampede) -> None:
    """A read of a killed master's keys is resent (it is safe to resend) until the
    replica is promoted, instead of failing with conn-failed for good."""
    group = "fo:{2}"
    keys = [f"{group}:a"]
    await st.write(group, {keys[0]: b"v"})
    node = replicated.master_for_slot(keyslot(keys[0]))
    caught_up(node)  # the replica has it
    node.kill()
    got = await st.read(group, keys, retry=RetryPolicy(deadline=60.0))
    assert got.consistent and got.values == {keys[0]: b"v"}


async def test_open_succeeds_while_a_startup_node_is_down(replicated: LocalCluster) -> None:
    """The first startup URL is a dead node: open() goes on to the next one."""
    dead = replicated.replicas[0]
    dead.kill()
    urls = [dead.url, replicated.masters[0].url]
    async with stampede.connect(urls, cluster=True, connection=FAILOVER) as st:
        await st.write("up:{1}", {"up:{1}:a": b"x"})
        assert (await st.read("up:{1}", ["up:{1}:a"])).consistent


def _flagged_failed(cluster: LocalCluster, dead: RedisNode) -> bool:
    """Whether a live master's view of the cluster flags `dead` as failed."""
    for node in cluster.masters:
        if node is dead:
            continue
        with contextlib.suppress(RedisError, OSError):
            nodes = command(node, "CLUSTER", "NODES")
            text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
            if any(dead.address in line and "fail" in line for line in text.splitlines()):
                return True
    return False


async def test_open_during_a_failover_waits_for_the_promoted_replica(
    replicated: LocalCluster,
) -> None:
    """A master is killed and a client opened before the cluster promoted its replica
    (the replica SIGSTOPped: no election can end): open() raised `SetupError`
    ("could not connect") at the dead master at once, where calls wait through the
    same failover. It waits now, within `failover_timeout`, learning the slot map
    again, and completes at the promoted replica."""
    dead, replica = replicated.masters[0], replicated.replicas[0]
    command(replica, "CONFIG", "SET", "cluster-replica-validity-factor", "0")  # may take over
    slot = next(s for s in range(0, 16384, 97) if replicated.master_for_slot(s) is dead)
    key = next(f"op:{{{i}}}:a" for i in range(100_000) if keyslot(f"op:{{{i}}}") == slot)
    group = key.removesuffix(":a")
    replica.pause()
    dead.kill()
    client = stampede.connect(
        [replicated.masters[1].url],
        cluster=True,
        connection=FAILOVER.model_copy(update={"failover_timeout": 90.0}),
    )
    try:
        opening = asyncio.ensure_future(client.open())

        async def flagged() -> bool:
            return await asyncio.to_thread(_flagged_failed, replicated, dead)

        await eventually(flagged, within=60.0)
        assert not opening.done(), opening.exception()  # no node owns its slots now
        replica.resume()
        await opening
        assert dead.address not in client.topology.shard_names
        await client.write(group, {key: b"after"})
        assert replica.client().get(key) is not None
    finally:
        replica.resume()
        await client.aclose()


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[RedisNode, RedisNode]]:
    """A standalone primary and a replica of it."""
    primary = RedisNode()
    primary.start()
    replica = RedisNode(extra_args=["--replicaof", primary.host, str(primary.port)])
    replica.start()
    try:
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


async def test_a_replica_url_is_refused_naming_its_primary(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """open() refuses a replica where a primary is needed, before anything is written,
    and says which primary to list instead."""
    primary, replica = primary_and_replica
    st = stampede.connect([replica.url], connection=FAILOVER)
    with pytest.raises(SetupError) as caught:
        await st.open()
    await st.aclose()
    assert caught.value.problem == "replica" and primary.address in str(caught.value)


async def test_durability_reports_what_each_shard_acknowledged(replicated: LocalCluster) -> None:
    """Durability(replicas=1): WAIT follows the write on its connection; every shard's
    replica acknowledged, so the receipt is durable. Asking for more replicas than
    exist reports the shortfall (durable False) instead of raising."""
    async with stampede.connect(replicated.url, cluster=True, connection=FAILOVER) as st:
        keys = [f"dur:{i}" for i in range(12)]
        receipt = await st.write(
            "dur", dict.fromkeys(keys, b"v"), durability=Durability(replicas=1, timeout=5)
        )
        assert receipt.durable is True and receipt.replicas
        assert set(receipt.replicas.values()) == {1}
        more = await st.write(
            "dur", dict.fromkeys(keys, b"w"), durability=Durability(replicas=2, timeout=0.05)
        )
        assert more.durable is False and max(more.replicas.values()) <= 1
        assert (await st.read("dur", keys)).values == dict.fromkeys(keys, b"w")
        plain = await st.write("dur", dict.fromkeys(keys, b"x"))
        assert plain.durable is None and plain.replicas == {}


async def test_durability_over_independent_primaries(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """The same over a primary with one replica (client-side sharding), commit mode:
    the commit record waits too."""
    primary, _ = primary_and_replica
    async with stampede.connect(
        [primary.url], connection=FAILOVER, durability=Durability(replicas=1, timeout=5)
    ) as st:
        receipt = await st.write("d:{1}", {"d:{1}:a": b"1", "d:{1}:b": b"2"}, mode="commit")
        assert receipt.durable is True and receipt.replicas == {primary.address: 1}


async def test_transactions_wait_for_replicas_and_abort_when_a_prepare_falls_short(
    replicated: LocalCluster,
) -> None:
    """Durability on a transaction: every prepare and commit waits on its own connection;
    the receipt says what each shard acknowledged. A prepare short of the replicas asked
    aborts the transaction before anything is visible; a one-slot transaction (its one
    call is the commit) reports the shortfall on the receipt instead."""
    async with stampede.connect(replicated.url, cluster=True, connection=FAILOVER) as st:
        keys = [f"dtx:{i}" for i in range(9)]  # spread over the three masters
        async with st.transaction(durability=Durability(replicas=1, timeout=5)) as tx:
            for key in keys:
                tx.set(key, b"one")
        assert tx.receipt is not None and tx.receipt.durable is True
        assert set(tx.receipt.replicas.values()) == {1} and len(tx.receipt.replicas) == 3
        assert not tx.receipt.pending

        with pytest.raises(TransactionAborted, match="replica"):
            async with st.transaction(durability=Durability(replicas=2, timeout=0.05)) as tx:
                for key in keys:
                    tx.set(key, b"two")
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"one")

        tagged = ["dtx:{t}:a", "dtx:{t}:b"]
        async with st.transaction(durability=Durability(replicas=2, timeout=0.05)) as tx:
            for key in tagged:
                tx.set(key, b"solo")
        assert tx.receipt is not None and tx.receipt.atomic and tx.receipt.durable is False
        assert (await st.read_atomic(tagged)).values == dict.fromkeys(tagged, b"solo")

        async with st.transaction() as tx:
            tx.set(keys[0], b"plain")
        assert tx.receipt is not None and tx.receipt.durable is None
        assert tx.receipt.replicas == {}


async def test_the_durability_option_applies_to_transactions_over_primaries(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """connect(durability=...) is every transaction's default: a two-phase transaction
    over keys of several slots on one primary waits for its replica at both steps."""
    primary, _ = primary_and_replica
    async with stampede.connect(
        [primary.url], connection=FAILOVER, durability=Durability(replicas=1, timeout=5)
    ) as st:
        async with st.transaction() as tx:
            tx.set("dp:a", b"1")
            tx.set("dp:b", b"2")
        assert tx.receipt is not None and not tx.receipt.atomic
        assert tx.receipt.durable is True and tx.receipt.replicas == {primary.address: 1}


async def test_a_write_that_timed_out_at_a_paused_master_lands_once_it_resumes() -> None:
    """A master paused for writes (CLIENT PAUSE ... WRITE) keeps its slots: the write
    that timed out there goes to it again as soon as it answers, instead of waiting
    out the whole failover window for another owner that never comes (found by the
    failover chaos scenarios)."""
    options = ConnectOptions(
        socket_timeout=0.5, connect_timeout=0.5, connection_retries=1, failover_timeout=30.0
    )
    with LocalCluster(3) as cluster:
        async with stampede.connect(cluster.url, cluster=True, connection=options) as st:
            group, key = "pw:{1}", "pw:{1}:a"
            await st.write(group, {key: b"before"})
            master = cluster.master_for_slot(keyslot(key))
            master.client().execute_command("CLIENT", "PAUSE", 2000, "WRITE")  # type: ignore[no-untyped-call]
            receipt = await st.write(group, {key: b"after"})  # times out, then lands
            assert receipt.keys == (key.encode(),)
            assert (await st.read(group, [key])).values == {key: b"after"}


async def test_a_primary_that_moves_by_dns_is_followed_past_readonly(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """A managed failover behind one name (a proxy stands in for DNS): the replica is
    promoted, the old primary demoted (it keeps its connections) and the name now
    leads to the new one. The client's next write met READONLY on its old connection,
    and every later one too, for good; now the connections are made again (through
    the name) and the write, safe to resend, lands on the new primary, as does
    `multi()` after it."""
    primary, replica = primary_and_replica
    async with RedisProxy(primary.address) as proxy:
        options = ConnectOptions(socket_timeout=1.0, connect_timeout=0.5)
        async with stampede.connect([proxy.url], connection=options) as st:
            await st.write("dn:{1}", {"dn:{1}:a": b"1"})
            caught_up(primary)
            command(replica, "REPLICAOF", "NO", "ONE")
            command(primary, "REPLICAOF", replica.host, str(replica.port))
            proxy.target = (replica.host, replica.port)  # the name resolves anew
            receipt = await st.write("dn:{1}", {"dn:{1}:a": b"2"})
            assert receipt.keys == (b"dn:{1}:a",)
            assert await multi(st, [("INCR", "dn:n")]) == [1]
            assert replica.client().get("dn:{1}:a") is not None
            assert (await st.read("dn:{1}", ["dn:{1}:a"])).values == {"dn:{1}:a": b"2"}


async def test_a_call_behind_a_long_wait_is_not_cut_short(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """A durable write whose WAIT outlasts the socket timeout (its replica paused) holds
    a connection of its own: a plain write sent meanwhile to the same primary is not
    queued behind the WAIT (where it timed out, and took the durable write's connection
    down with it); the durable one reports its shortfall (found by the failover chaos
    scenarios)."""
    primary, replica = primary_and_replica
    caught_up(primary)
    options = ConnectOptions(socket_timeout=0.5, connect_timeout=0.5, connection_retries=1)
    async with stampede.connect([primary.url], connection=options) as st:
        await st.write("hb:{1}", {"hb:{1}:a": b"0"})
        replica.pause()
        durable = asyncio.ensure_future(
            st.write("hd:{1}", {"hd:{1}:a": b"1"}, durability=Durability(replicas=1, timeout=1.5))
        )
        admin = primary.client()

        async def waiting() -> bool:  # the WAIT is under way
            return int(admin.info("clients")["blocked_clients"]) >= 1

        await eventually(waiting)
        plain = await st.write("hb:{1}", {"hb:{1}:a": b"1"})
        receipt = await durable
        replica.resume()
        assert plain.keys and not durable.exception()
        assert receipt.durable is False and receipt.replicas == {primary.address: 0}


async def _scanned(st: Stampede, shard: str, prefix: bytes) -> int:
    """How many keys starting with `prefix` a whole SCAN of `shard` finds."""
    found: set[bytes] = set()
    cursor: Any = 0
    while True:
        cursor, keys = await st.topology.execute_on(shard, "SCAN", cursor, "COUNT", 500)
        found.update(k for k in keys if k.startswith(prefix))
        if int(cursor) == 0:
            return len(found)


SCANNED = ConnectOptions(socket_timeout=1.0, connect_timeout=0.5)


async def test_a_scan_across_a_restart_is_refused_not_cut_short() -> None:
    """An independent primary restarts between two pages of a SCAN (and gets its keys
    back): the next page, asked with the cursor of the process before the restart,
    raises `ShardUnavailable` (the new process hashes its keys with a new seed: going
    on skipped keys, silently; only a Sentinel failover was caught). A scan begun
    again finds every key."""
    with RedisNode() as node:
        keys = {f"sc:{i}": b"x" for i in range(2000)}
        node.client().mset(keys)
        async with stampede.connect([node.url], connection=SCANNED) as st:
            shard = st.topology.shard_names[0]
            cursor, _ = await st.topology.execute_on(shard, "SCAN", 0, "COUNT", 100)
            assert int(cursor) != 0
            node.restart()  # a new process (a new run_id), empty
            node.client().mset(keys)
            with pytest.raises(ShardUnavailable, match="scan of this shard again"):
                await st.topology.execute_on(shard, "SCAN", cursor, "COUNT", 100)
            assert await _scanned(st, shard, b"sc:") == len(keys)


async def test_two_scans_of_one_shard_sharing_a_cursor_are_both_checked() -> None:
    """Two scans of one shard hand out the same cursor (the same table, the same
    COUNT); the first goes on, then the server restarts: the second, going on with
    that cursor, is refused too (the cursor's origin was forgotten once the first
    scan used it, and the second went on unchecked)."""
    with RedisNode() as node:
        keys = {f"tw:{i}": b"x" for i in range(2000)}
        node.client().mset(keys)
        async with stampede.connect([node.url], connection=SCANNED) as st:
            shard = st.topology.shard_names[0]
            first, _ = await st.topology.execute_on(shard, "SCAN", 0, "COUNT", 100)
            second, _ = await st.topology.execute_on(shard, "SCAN", 0, "COUNT", 100)
            assert first == second and int(first) != 0
            await st.topology.execute_on(shard, "SCAN", first, "COUNT", 100)
            node.restart()
            node.client().mset(keys)
            with pytest.raises(ShardUnavailable, match="scan of this shard again"):
                await st.topology.execute_on(shard, "SCAN", second, "COUNT", 100)


async def test_a_scan_across_a_dns_move_is_refused_not_cut_short(
    primary_and_replica: tuple[RedisNode, RedisNode],
) -> None:
    """The name of a shard leads to another server between two pages of a SCAN (a
    proxy stands in for DNS; the other server holds the same keys): the next page,
    on a fresh connection there, raises `ShardUnavailable` instead of going on with
    a cursor that means nothing on that server."""
    primary, replica = primary_and_replica
    primary.client().mset({f"dm:{i}": b"x" for i in range(2000)})
    caught_up(primary)
    async with RedisProxy(primary.address) as proxy:
        async with stampede.connect([proxy.url], connection=SCANNED) as st:
            shard = st.topology.shard_names[0]
            cursor, _ = await st.topology.execute_on(shard, "SCAN", 0, "COUNT", 100)
            assert int(cursor) != 0
            proxy.target = (replica.host, replica.port)  # the name resolves anew
            command(primary, "CLIENT", "KILL", "TYPE", "normal")  # connections drop
            with pytest.raises(ShardUnavailable, match="scan of this shard again"):
                await st.topology.execute_on(shard, "SCAN", cursor, "COUNT", 100)
            assert await _scanned(st, shard, b"dm:") == 2000


async def test_a_scan_across_a_cluster_node_restart_is_refused_not_cut_short() -> None:
    """A cluster primary (no replica: it keeps its slots) restarts between two pages
    of a SCAN of it: the next page raises `ShardUnavailable`, as over independent
    primaries, instead of skipping keys."""
    with LocalCluster(3) as cluster:
        master = cluster.masters[0]
        tag = next(
            f"{{t{i}}}"
            for i in range(10_000)
            if cluster.master_for_slot(keyslot(f"{{t{i}}}")) is master
        )
        keys = {f"{tag}:{i}": b"x" for i in range(2000)}
        master.client().mset(keys)
        async with stampede.connect(cluster.url, cluster=True, connection=SCANNED) as st:
            shard = master.address
            assert shard in st.topology.shard_names
            cursor, _ = await st.topology.execute_on(shard, "SCAN", 0, "COUNT", 100)
            assert int(cursor) != 0
            master.restart()  # keeps nodes.conf: the same node, its slots, a new process
            await asyncio.to_thread(cluster.wait_until_ok, 60.0)
            master.client().mset(keys)
            with pytest.raises(ShardUnavailable, match="scan of this shard again"):
                await st.topology.execute_on(shard, "SCAN", cursor, "COUNT", 100)
            assert await _scanned(st, shard, tag.encode()) == len(keys)
