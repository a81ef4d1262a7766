"""Servers with replicas for the failover scenarios, and the failovers themselves.

- `ReplicatedCluster`: `LocalCluster(3, replicas=1)`, node timeout 1 s. Faults:
  `graceful` (`CLUSTER FAILOVER` on the victim's replica), `kill` (SIGKILL the
  master; restarted once its replica is promoted, it rejoins as a replica), `stop`
  (SIGSTOP the master until its replica is promoted, then SIGCONT: it comes back as
  a replica) and `lossy` (the replica's link is cut, so it receives nothing more,
  while the master takes `LOSSY_BYTES` of writes; then the master is SIGKILLed and
  the replica takes over with `CLUSTER FAILOVER TAKEOVER`: what the master took
  since the cut is lost for certain, which a kill on localhost never made happen).
- `SentinelPrimaries`: `LocalSentinels(2, replicas=1, sentinels=3)`. Faults: `kill`
  (SIGKILL the primary of the first service; Sentinel promotes its replica; the old
  primary is restarted and Sentinel makes it a replica) and `lossy` (the same, the
  replica's link cut first, as for the cluster).

Each fault records, in the history, the fault (`failover-graceful`, `failover-kill`,
`failover-stop`, `failover-lossy`, `sentinel-kill`, `sentinel-lossy`) with the shard
and the workload keys that lived on it, then `promoted` once the replica answers as
the primary. A fault that may lose acknowledged writes (every one but `graceful`)
also records a `loss` event at the moment of the fault (for `lossy`, the kill), with
the same keys: the checker excuses only what began before it, touched those keys and
was not acknowledged as durable. Waiting is done on events (roles,
`cluster_state:ok`, a replication offset), each with a generous upper bound.

A cluster replica is asked to take over only once its own last election is older than
`ELECTION_RETRY`, and a cluster fault fails the run if the shard is not served by the
promoted replica once the cluster is ok again: a failover that Redis reverted is never
measured as one.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Self

from redis.exceptions import RedisError

from stampede.keys import keyslot
from stampede.options import ConnectOptions
from stampede.testing import LocalCluster, LocalSentinels, RedisNode
from stampede.testing._admin import command
from stampede.topology import SentinelShards
from stampede.topology._cluster import Cluster
from stampede.typing import Topology

from .history import History, text

__all__ = [
    "FAILOVER_CONNECTION",
    "FailoverServers",
    "ReplicatedCluster",
    "SentinelPrimaries",
    "wait_until",
]

FAILOVER_CONNECTION = ConnectOptions(
    socket_timeout=0.5, connect_timeout=0.5, connection_retries=1, failover_timeout=15.0
)
"""Short socket timeouts (a stopped master fails calls after half a second); calls safe
to resend wait through an election for up to 15 s (a busy machine elects slowly)."""

EVENT_TIMEOUT = 90.0
"""The upper bound on any wait for a failover event (a bound, never a measure)."""

NODE_TIMEOUT = 1.0
"""`cluster-node-timeout` of `ReplicatedCluster`, in seconds."""

ELECTION_RETRY = 2 * max(2 * NODE_TIMEOUT, 2.0) + 0.5
"""Seconds a cluster replica must be past its own last election before it is failed over
to: Redis's retry time (twice the auth timeout, `max(2 x node timeout, 2 s)`: 4 s here)
and a margin. Sooner, Redis 7.0 (`clusterHandleSlaveFailover`) does not start a new
election: within the auth timeout it counts the *previous* election's votes and "wins"
at once, at that election's epoch, and the current master's newer epoch turns it back
into a replica a few milliseconds later (the manual failover is then over, never
retried, and the master stays paused for writes until its timeout); between the auth
timeout and the retry time it waits for the retry. The failover-graceful campaign of
2026-11-25 hit both: runs alternate the shard between two nodes, about a second apart."""


LOSSY_BYTES = 65536
"""How much the master of a `lossy` fault replicates to nobody before it is killed (its
replication offset past the cut): a few hundred workload writes on its shard."""

SENTINEL_DOWN_MS = 3000
"""The Sentinels' `down-after-milliseconds` in the Sentinel failover scenario."""

SENTINEL_DEMOTES = 30.0
"""Seconds the Sentinels get to make a restarted old primary a replica before the
scenario does it by hand (they usually take a few)."""


async def wait_until(
    what: str, ready: Callable[[], bool], *, step: float = 0.02, within: float = EVENT_TIMEOUT
) -> None:
    """Poll `ready` (in a thread: it talks to servers) until it is true; `TimeoutError`
    naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not seen in {within:g} s")
        await asyncio.sleep(step)


def _role(node: RedisNode) -> list[object] | None:
    """ROLE of a node, or None when it does not answer (down, stopped, loading)."""
    if not node.is_running or node.is_paused:
        return None
    try:
        reply = command(node, "ROLE")
    except (RedisError, OSError):
        return None
    return list(reply)


def is_primary(node: RedisNode) -> bool:
    role = _role(node)
    return role is not None and role[0] == b"master"


def _offset(node: RedisNode) -> int:
    """The replication offset of a primary: how much it has taken so far."""
    with node.client() as client:
        info = client.info("replication")
    return int(info.get("master_repl_offset", 0))


def cut_off(replica: RedisNode) -> None:
    """From now on `replica` receives nothing from its primary: its link is closed and
    every attempt to make it again fails to authenticate (`mend` undoes that)."""
    command(replica, "CONFIG", "SET", "masteruser", "stampede-chaos-nobody")
    command(replica, "CONFIG", "SET", "masterauth", "stampede-chaos-nothing")
    command(replica, "CLIENT", "KILL", "TYPE", "master")


def mend(node: RedisNode) -> None:
    """Undo `cut_off`: `node` can follow a primary again (as a replica, some day)."""
    command(node, "CONFIG", "SET", "masteruser", "")
    command(node, "CONFIG", "SET", "masterauth", "")


async def cut_and_wait(primary: RedisNode, replica: RedisNode) -> None:
    """`cut_off` the replica, then wait until `primary` took `LOSSY_BYTES` more."""
    await asyncio.to_thread(cut_off, replica)
    cut = await asyncio.to_thread(_offset, primary)
    taken = lambda: _offset(primary) >= cut + LOSSY_BYTES  # noqa: E731
    await wait_until(f"{primary.address} taking writes its replica lacks", taken)


def replica_of(node: RedisNode, primary: RedisNode) -> bool:
    """Whether `node` is a replica of `primary` with its link up."""
    role = _role(node)
    if role is None or role[0] != b"slave":
        return False
    return int(str(role[2])) == primary.port and role[3] == b"connected"


@dataclass
class Fault:
    """What `FailoverServers.inject` did: the shard, the victim, the node promoted."""

    kind: str
    shard: str
    victim: RedisNode
    promoted: RedisNode


class FailoverServers:
    """Servers a failover scenario runs on (subclasses: a cluster, Sentinel primaries)."""

    kind = "?"

    def __enter__(self) -> Self:
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        raise NotImplementedError

    def topology(self) -> Topology:
        raise NotImplementedError

    def victim(self, topology: Topology, key: bytes) -> tuple[str, RedisNode, RedisNode]:
        """The shard of `key`, its primary and the replica that will take over."""
        raise NotImplementedError

    async def inject(
        self, fault: str, topology: Topology, key: bytes, keys: Sequence[bytes], history: History
    ) -> Fault:
        """Fail over the shard of `key` as `fault` says; return once the replica is
        promoted and the old primary is back as a replica (`keys`: the workload keys
        on that shard, recorded with the fault)."""
        raise NotImplementedError

    async def reset(self) -> None:
        """Heal every node and empty every primary (and its replica)."""
        raise NotImplementedError

    def _record(self, kind: str, shard: str, keys: Sequence[bytes], history: History) -> None:
        names = sorted(text(k) for k in keys)
        history.fault(kind, shard=shard, keys=names)
        if not kind.endswith("graceful"):
            history.fault("loss", shard=shard, keys=names)

    def _healed(
        self, kind: str, shard: str, victim: RedisNode, keys: Sequence[bytes], history: History
    ) -> None:
        """The old primary is a replica again: what it took since it came back (a client
        that still routed to its address) is gone too, so a second `loss`."""
        history.fault("healed", shard=shard, node=victim.address)
        if not kind.endswith("graceful"):
            history.fault("loss", shard=shard, keys=sorted(text(k) for k in keys))


class ReplicatedCluster(FailoverServers):
    """Three masters with a replica each, node timeout 1 s (`LocalCluster`)."""

    kind = "cluster"

    def __init__(self) -> None:
        timeout = str(int(NODE_TIMEOUT * 1000))
        self.cluster = LocalCluster(3, replicas=1, extra_args=["--cluster-node-timeout", timeout])
        self.elected: dict[str, float] = {}
        """node address -> when (monotonic) it was last seen promoted by a fault."""

    def __enter__(self) -> Self:
        self.cluster.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cluster.stop()

    def topology(self) -> Topology:
        return Cluster(self.cluster.urls, options=FAILOVER_CONNECTION)

    def victim(self, topology: Topology, key: bytes) -> tuple[str, RedisNode, RedisNode]:
        shard = topology.shard_of(key)
        primary = next(n for n in self.cluster.nodes if n.address == shard)
        replica = next(n for n in self.cluster.nodes if replica_of(n, primary))
        return shard, primary, replica

    async def inject(
        self, fault: str, topology: Topology, key: bytes, keys: Sequence[bytes], history: History
    ) -> Fault:
        shard, victim, replica = await asyncio.to_thread(self.victim, topology, key)
        last = self.elected.get(replica.address, -math.inf)
        if (wait := last + ELECTION_RETRY - time.monotonic()) > 0:
            await asyncio.sleep(wait)  # the workload runs on; the fault is recorded after
        if fault == "graceful":
            command(replica, "CLUSTER", "FAILOVER")
        elif fault == "kill":
            victim.kill()
        elif fault == "stop":
            victim.pause()
        elif fault == "lossy":
            await cut_and_wait(victim, replica)
            victim.kill()
            await asyncio.to_thread(command, replica, "CLUSTER", "FAILOVER", "TAKEOVER")
        else:
            raise ValueError(f"unknown fault {fault!r}")
        self._record(f"failover-{fault}", shard, keys, history)
        await wait_until(f"{replica.address} promoted", lambda: is_primary(replica))
        history.fault("promoted", shard=shard, node=replica.address)
        self.elected[replica.address] = time.monotonic()
        if fault == "lossy":
            await asyncio.to_thread(mend, replica)
        if fault in ("kill", "lossy"):
            victim.restart()  # on the loop's thread: the parent-death signal (RedisNode)
        elif fault == "stop":
            victim.resume()
        # Ready: every node up, one table, each master with its replica; and the shard
        # served by the promoted node (not necessarily with the victim as its replica).
        await asyncio.to_thread(self.cluster.wait_until_ok, EVENT_TIMEOUT)
        owner = await asyncio.to_thread(self.cluster.master_for_slot, keyslot(key))
        if owner.address != replica.address:
            raise RuntimeError(
                f"{fault} of {shard}: {replica.address} was seen promoted, but "
                f"{owner.address} serves the shard once the cluster is ok: the failover "
                "was reverted (see ELECTION_RETRY)"
            )
        self._healed(fault, shard, victim, keys, history)
        return Fault(fault, shard, victim, replica)

    async def reset(self) -> None:
        await asyncio.to_thread(self.cluster.heal, timeout=EVENT_TIMEOUT)
        for node in self.cluster.nodes:  # (a run that failed before its `mend`)
            await asyncio.to_thread(mend, node)
        await asyncio.to_thread(self.cluster.flushall)


class SentinelPrimaries(FailoverServers):
    """Two services, a primary and a replica each, three Sentinels (`LocalSentinels`)."""

    kind = "sentinel"

    def __init__(self) -> None:
        # down after 3 s, not 1: on a starved machine (two CPU hogs on two cores) a 1 s
        # window let the Sentinels judge the just-promoted primary down and fail over
        # again, to the old primary restarted empty (which nothing then could save)
        self.servers = LocalSentinels(2, replicas=1, sentinels=3, down_after_ms=SENTINEL_DOWN_MS)

    def __enter__(self) -> Self:
        self.servers.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.servers.stop()

    def topology(self) -> Topology:
        return SentinelShards(
            self.servers.sentinel_urls, self.servers.names, options=FAILOVER_CONNECTION
        )

    def _data_nodes(self) -> list[RedisNode]:
        return list(self.servers.servers())

    def victim(self, topology: Topology, key: bytes) -> tuple[str, RedisNode, RedisNode]:
        shard = topology.shard_of(key)
        primary = self.servers.node_at(self.servers.primary_of(shard))
        replica = next(n for n in self._data_nodes() if replica_of(n, primary))
        return shard, primary, replica

    async def inject(
        self, fault: str, topology: Topology, key: bytes, keys: Sequence[bytes], history: History
    ) -> Fault:
        if fault not in ("kill", "lossy"):
            raise ValueError(f"unknown fault {fault!r}")
        shard, victim, replica = await asyncio.to_thread(self.victim, topology, key)
        if fault == "lossy":
            await cut_and_wait(victim, replica)
        victim.kill()
        self._record(f"sentinel-{fault}", shard, keys, history)
        where = (replica.host, replica.port)
        await wait_until(
            f"Sentinel promoting {replica.address}",
            lambda: self.servers.primary_of(shard) == where and is_primary(replica),
        )
        history.fault("promoted", shard=shard, node=replica.address)
        if fault == "lossy":
            await asyncio.to_thread(mend, replica)
        # empty, and a primary at its old address until the Sentinels demote it (seconds
        # later): the client must not write to it meanwhile (the checker would see the
        # writes lost when it becomes a replica)
        victim.restart()
        demoted = lambda: replica_of(victim, replica)  # noqa: E731
        try:
            await wait_until(f"{victim.address} a replica", demoted, within=SENTINEL_DEMOTES)
        except TimeoutError:  # Sentinel now and then leaves it be: as a restart script would
            history.fault("demoted-by-hand", shard=shard, node=victim.address)
            command(victim, "REPLICAOF", replica.host, replica.port)
            await wait_until(f"{victim.address} a replica", demoted)
        self._healed(f"sentinel-{fault}", shard, victim, keys, history)
        return Fault(fault, shard, victim, replica)

    async def reset(self) -> None:
        def flush() -> None:
            for node in self._data_nodes():  # (a run that failed before its `mend`)
                if node.is_running:
                    mend(node)
            for name in self.servers.names:
                primary = self.servers.node_at(self.servers.primary_of(name))
                command(primary, "FLUSHALL")
                command(primary, "WAIT", 1, 5000)

        await asyncio.to_thread(flush)
