"""Read-atomic transactions meeting a real failover that loses writes.

Each test builds the state a failover leaves, deterministically, on a real cluster
with a replica per master (or Sentinel-managed primaries with a replica each): the
replica's link to its master is cut (it cannot authenticate again, so it receives
nothing more), the master takes writes the replica never sees, then the master is
killed and the replica promoted with `CLUSTER FAILOVER TAKEOVER` (or by the
Sentinels). No sleep decides anything: each step waits for its event (the replica's
offset, its role)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import pytest

import stampede
from stampede import Durability, ShardError, ShardUnavailable, Stampede, TransactionAborted
from stampede._txn.scripts import COMMIT, COMMIT_ONE
from stampede.keys import keyslot
from stampede.options import ConnectOptions
from stampede.repair import sweep_versions
from stampede.testing import LocalCluster, LocalSentinels, RedisNode
from stampede.testing._admin import command
from stampede.testing.faults import DelegatingTopology, InjectedCrash

from ..support import caught_up

pytestmark = pytest.mark.timeout(180)  # real elections, on a machine that may be busy

OPTIONS = ConnectOptions(
    socket_timeout=1.0, connect_timeout=0.5, connection_retries=1, failover_timeout=30.0
)
A, B = "rfo:{a}", "rfo:{b}"  # two slots, on two masters (checked)


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """Three masters with a replica each (a fresh cluster per test: each kills one)."""
    servers = LocalCluster(3, replicas=1, extra_args=["--cluster-node-timeout", "1000"])
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def st(cluster: LocalCluster) -> AsyncIterator[Stampede]:
    async with stampede.connect(
        [m.url for m in cluster.masters], cluster=True, connection=OPTIONS
    ) as client:
        yield client


def _replica_of(cluster: LocalCluster, master: RedisNode) -> RedisNode:
    for node in cluster.replicas:
        role = command(node, "ROLE")
        if role[0] == b"slave" and int(role[2]) == master.port:
            return node
    raise LookupError(f"no replica of {master}")


def _cut(replica: RedisNode) -> None:
    """From now on `replica` receives nothing from its master: its link is closed and
    every attempt to make it again fails authentication."""
    command(replica, "CONFIG", "SET", "masteruser", "no-such-user")
    command(replica, "CONFIG", "SET", "masterauth", "no-such-password")
    command(replica, "CLIENT", "KILL", "TYPE", "master")


def _fail_over(master: RedisNode, replica: RedisNode) -> None:
    """The master dies; its replica (whatever it has) takes its slots over."""
    master.kill()
    command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")
    deadline = time.monotonic() + 60
    while command(replica, "ROLE")[0] != b"master":
        if time.monotonic() > deadline:
            raise AssertionError(f"{replica} not promoted in 60 s")
        time.sleep(0.05)


def _victim(cluster: LocalCluster) -> tuple[RedisNode, RedisNode]:
    """The master of A (not B's) and its replica."""
    master = cluster.master_for_slot(keyslot(A))
    assert master is not cluster.master_for_slot(keyslot(B))
    return master, _replica_of(cluster, master)


class Before(DelegatingTopology):
    """Runs `action` (in a thread: it blocks) before the first call of `script` that
    names `key` (plain or durable), once; `crash` makes every later call of `script`
    to other keys raise `InjectedCrash` (the writer died there)."""

    def __init__(
        self, inner: Any, script: Any, key: str, action: Callable[[], None], crash: bool = False
    ) -> None:
        super().__init__(inner)
        self.sha, self.key, self.action, self.crash = script.sha, key.encode(), action, crash
        self.done = False

    async def _before(self, script: Any, keys: Sequence[bytes]) -> None:
        if script.sha == self.sha:
            if self.key not in keys and self.crash:
                raise InjectedCrash("the writer died before this commit")
            if self.key in keys and not self.done:
                self.done = True
                await asyncio.to_thread(self.action)

    async def script(self, script: Any, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        await self._before(script, keys)
        return await self.inner.script(script, keys, args)

    async def durable_script(
        self, script: Any, keys: Sequence[bytes], args: Sequence[Any], then: list[Any]
    ) -> tuple[Any, int]:
        await self._before(script, keys)
        return await self.inner.durable_script(script, keys, args, then)


async def _old(st: Stampede, cluster: LocalCluster) -> None:
    async with st.transaction() as tx:
        tx.set(A, b"old")
        tx.set(B, b"old")
    for master in cluster.masters:
        caught_up(master)


async def test_a_commit_that_finds_its_prepare_lost_in_a_failover_prepares_it_again(
    cluster: LocalCluster, st: Stampede
) -> None:
    """T's prepare at A reached the master only; the master dies before T's commit and
    the replica is promoted without it. The commit at A (resent to the promoted
    replica) finds no prepared version while B's commit made T visible. The writer
    prepares A again and commits it: the receipt has nothing pending and read_atomic
    returns T whole. (Before: a receipt with A `pending`, which transactions.md says
    read_atomic returns whole, and read_atomic read A as missing, for good.)"""
    await _old(st, cluster)
    master, replica = _victim(cluster)
    _cut(replica)
    wrapped = stampede.Stampede(Before(st.topology, COMMIT, A, lambda: _fail_over(master, replica)))
    tx = wrapped.transaction()
    tx.set(A, b"new")
    tx.set(B, b"new")
    receipt = await tx.commit()
    assert receipt.pending == () and receipt.superseded == ()
    got = await st.read_atomic([A, B])
    assert got.values == {A: b"new", B: b"new"}
    assert got.stamps[A] == got.stamps[B] == (receipt.version, receipt.token)


async def test_a_commit_lost_in_a_failover_is_completed_by_a_reader_or_the_sweep(
    cluster: LocalCluster, st: Stampede
) -> None:
    """T's prepares reached every replica; its commit at A reached the master only and
    the writer died before committing B. A reader before the failover returns T whole
    (and commits B itself); after the failover, A holds T prepared only: the next
    reader returns T whole again (never the older value at A, which the first reader
    returned newer than), and the sweep makes A current."""
    await _old(st, cluster)
    master, replica = _victim(cluster)

    def cut_after_prepares() -> None:
        caught_up(master)  # the replica has T's prepare at A
        _cut(replica)

    wrapped = stampede.Stampede(
        Before(st.topology, COMMIT, A, cut_after_prepares, crash=True),
    )
    tx = wrapped.transaction()
    tx.set(A, b"new")
    tx.set(B, b"new")
    with pytest.raises(InjectedCrash):
        await tx.commit()
    first = await st.read_atomic([A, B])
    assert first.values == {A: b"new", B: b"new"}
    caught_up(cluster.master_for_slot(keyslot(B)))
    await asyncio.to_thread(_fail_over, master, replica)
    again = await st.read_atomic([A, B])
    assert again.values == {A: b"new", B: b"new"} and again.stamps == first.stamps
    await sweep_versions(st.topology)
    alone = await st.read_atomic([A])
    assert alone.values == {A: b"new"} and alone.rounds == 1


def _on(st: Stampede, shard: str, prefix: str) -> str:
    """A key of `st` that lives on `shard`."""
    return next(
        key
        for i in range(1000)
        if st.topology.shard_of((key := f"{prefix}:{{{i}}}").encode()) == shard
    )


async def test_a_prepare_lost_in_a_sentinel_failover_is_prepared_again() -> None:
    """The same over Sentinel: T's prepare at shard-a reached its primary only; the
    primary dies before T's commit and the Sentinels promote the replica without it.
    The commit, resent to the new primary once the client follows the Sentinels, finds
    no prepared version while shard-b holds T: the writer prepares it again, and T
    reads whole."""
    with LocalSentinels(2, replicas=1, sentinels=3) as servers:
        async with stampede.connect(
            sentinels=servers.sentinel_urls, services=servers.names, connection=OPTIONS
        ) as st:
            name = servers.names[0]
            a, b = _on(st, name, "sfo"), _on(st, servers.names[1], "sfo")
            async with st.transaction() as tx:
                tx.set(a, b"old")
                tx.set(b, b"old")
            primary = servers.node_at(servers.primary_of(name))
            replica = next(n for n in servers.replicas if n.port in _followers(primary))
            caught_up(primary)
            _cut(replica)

            def fail_over() -> None:
                primary.kill()
                deadline = time.monotonic() + 60
                while servers.primary_of(name) != (replica.host, replica.port) or (
                    command(replica, "ROLE")[0] != b"master"
                ):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{replica} not promoted in 60 s")
                    time.sleep(0.05)

            wrapped = stampede.Stampede(Before(st.topology, COMMIT, a, fail_over))
            tx = wrapped.transaction()
            tx.set(a, b"new")
            tx.set(b, b"new")
            receipt = await tx.commit()
            assert receipt.pending == ()
            got = await st.read_atomic([a, b])
            assert got.values == {a: b"new", b: b"new"}


def _followers(primary: RedisNode) -> set[int]:
    """The ports of `primary`'s replicas, as it lists them."""
    info = command(primary, "INFO", "replication")
    return {
        int(v["port"]) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
    }


async def test_a_durable_transaction_survives_a_failover_that_lost_its_commit(
    cluster: LocalCluster, st: Stampede
) -> None:
    """Durability(replicas=1): the prepares waited for the replicas; the replica of A is
    cut off before the commits, so A's commit falls short (receipt.durable False, as
    operations.md says) and the failover loses it. The prepare survived: read_atomic
    returns T whole after the promotion."""
    await _old(st, cluster)
    master, replica = _victim(cluster)
    wrapped = stampede.Stampede(Before(st.topology, COMMIT, A, lambda: _cut(replica)))
    tx = wrapped.transaction(durability=Durability(replicas=1, timeout=0.2))
    tx.set(A, b"new")
    tx.set(B, b"new")
    receipt = await tx.commit()
    assert receipt.durable is False and receipt.pending == ()
    await asyncio.to_thread(_fail_over, master, replica)
    got = await st.read_atomic([A, B])
    assert got.values == {A: b"new", B: b"new"}


async def test_a_durable_transaction_whose_prepare_fell_short_stays_invisible(
    cluster: LocalCluster, st: Stampede
) -> None:
    """The replica of A is cut off before the transaction: A's prepare falls short, the
    transaction aborts before anything is visible, and after the failover (to the
    replica that never had it) nothing of it is read, on either shard."""
    await _old(st, cluster)
    master, replica = _victim(cluster)
    _cut(replica)
    with pytest.raises(TransactionAborted, match="replica"):
        async with st.transaction(durability=Durability(replicas=1, timeout=0.2)) as tx:
            tx.set(A, b"new")
            tx.set(B, b"new")
    assert (await st.read_atomic([A, B])).values == {A: b"old", B: b"old"}
    await asyncio.to_thread(_fail_over, master, replica)
    assert (await st.read_atomic([A, B])).values == {A: b"old", B: b"old"}
    await sweep_versions(st.topology)
    assert (await st.read_atomic([A, B])).values == {A: b"old", B: b"old"}


class LostReplyThenFailover(DelegatingTopology):
    """The first COMMIT_ONE runs at the master (whose replica is cut off), the master
    dies and its replica takes over, and the call's reply is lost."""

    def __init__(self, inner: Any, master: RedisNode, replica: RedisNode) -> None:
        super().__init__(inner)
        self.master, self.replica = master, replica
        self.sends = 0

    async def script(self, script: Any, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha != COMMIT_ONE.sha:
            return await self.inner.script(script, keys, args)
        self.sends += 1
        if self.sends > 1:
            return await self.inner.script(script, keys, args)
        await asyncio.to_thread(_cut, self.replica)
        await self.inner.script(script, keys, args)
        await asyncio.to_thread(_fail_over, self.master, self.replica)
        raise ShardUnavailable("the reply was lost (injected)", shard="test")


async def test_a_one_slot_transaction_whose_reply_and_write_a_failover_lost_lands_once(
    cluster: LocalCluster, st: Stampede
) -> None:
    """A one-slot transaction ran at the master, which died before replicating it or
    answering: the resend reaches the promoted replica, which never had it, and writes
    it there (exactly once: one receipt, every key holds its stamp)."""
    keys = [f"{A}:x", f"{A}:y"]
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    master, replica = _victim(cluster)
    caught_up(master)
    lossy = LostReplyThenFailover(st.topology, master, replica)
    tx = stampede.Stampede(lossy).transaction()
    for key in keys:
        tx.set(key, b"new")
    receipt = await tx.commit()
    assert receipt.atomic and lossy.sends == 2
    got = await st.read_atomic(keys)
    assert got.values == dict.fromkeys(keys, b"new")
    assert set(got.stamps.values()) == {(receipt.version, receipt.token)}


class HoleAfterCommit(DelegatingTopology):
    """Once the durable COMMIT naming `key` has run, `hole()`: the client's slot map then
    names no owner of that key's slot, as a map reloaded mid-election was seen to."""

    def __init__(self, inner: Any, key: str, hole: Callable[[], Any]) -> None:
        super().__init__(inner)
        self.key, self.hole = key.encode(), hole
        self.done = False

    async def durable_script(
        self, script: Any, keys: Sequence[bytes], args: Sequence[Any], then: list[Any]
    ) -> tuple[Any, int]:
        out = await self.inner.durable_script(script, keys, args, then)
        if script.sha == COMMIT.sha and self.key in keys and not self.done:
            self.done = True
            await self.hole()
        return out

    def shard_of(self, key: bytes) -> str:
        """After the hole, as the client's reloaded map has it: no owner of the key's
        slot (the reload itself comes in the background, at its own moment: not
        waited for here, where the moment is the point)."""
        if self.done and keyslot(key) == keyslot(self.key):
            raise ShardUnavailable(
                f"no node is known to serve slot {keyslot(key)}", shard="cluster"
            )
        return str(self.inner.shard_of(key))


async def test_a_durable_transaction_committed_before_a_slot_lost_its_owner_has_a_receipt() -> None:
    """A durable transaction committed at every key; then (before the receipt) the client's
    slot map loses the owner of one key's slot. The writer returns its receipt (durable
    not confirmed: False), instead of raising ShardUnavailable for a transaction that
    was committed (it did: the receipt's durability looked the shards up again)."""
    brief = OPTIONS.model_copy(update={"failover_timeout": 0.3})  # (the hole stays)
    with LocalCluster(3, 1, extra_args=["--cluster-require-full-coverage", "no"]) as servers:
        async with stampede.connect(servers.url, cluster=True, connection=brief) as st:
            async with st.transaction() as tx:
                tx.set(A, b"old")
                tx.set(B, b"old")

            async def hole() -> None:
                for node in servers.nodes:
                    command(node, "CLUSTER", "DELSLOTS", keyslot(A))
                with pytest.raises(ShardError):  # the slot has no owner now
                    await st.topology.execute(A.encode(), "GET", A)

            wrapped = stampede.Stampede(HoleAfterCommit(st.topology, A, hole))
            tx = wrapped.transaction(durability=Durability(replicas=1, timeout=5))
            tx.set(A, b"new")
            tx.set(B, b"new")
            receipt = await tx.commit()
            assert receipt.pending == () and receipt.durable is False
            assert (await st.read_atomic([B])).values == {B: b"new"}
