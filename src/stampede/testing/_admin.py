"""Admin commands the harness sends with the sync redis-py client.

Shared by `LocalPrimaries`, `LocalCluster` and the docker backend: cluster
bootstrap, the health check behind `wait_until_ok`, and the slot table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis

from .errors import ClusterNotReadyError
from .node import RedisNode

ADMIN_TIMEOUT = 5.0
CLUSTER_SLOTS = 16384

# (first slot, last slot, master address, sorted replica addresses)
SlotRange = tuple[int, int, str, tuple[str, ...]]


def command(node: RedisNode, *args: str | int | bytes, timeout: float = ADMIN_TIMEOUT) -> Any:
    """Send one command on a fresh connection, without retries, and return the reply."""
    client = node.client(socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        # redis-py leaves execute_command unannotated; the reply is Any either way.
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    finally:
        client.close()


def reachable(node: RedisNode) -> bool:
    """Whether the node can answer at all (running and not paused)."""
    return node.is_running and not node.is_paused


def node_id(node: RedisNode) -> str:
    """The node's Redis Cluster id (40 hex characters)."""
    raw: bytes = command(node, "CLUSTER", "MYID")
    return raw.decode()


def is_master(node: RedisNode) -> bool:
    """Whether the node currently has the master role."""
    role = command(node, "ROLE")
    return bool(role[0] == b"master")


def cluster_info(node: RedisNode) -> dict[str, str]:
    """CLUSTER INFO as a dict of strings."""
    raw: bytes = command(node, "CLUSTER", "INFO")
    pairs = (line.partition(":") for line in raw.decode().splitlines() if ":" in line)
    return {key: value for key, _, value in pairs}


def _address(entry: Sequence[Any]) -> str:
    ip = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
    return f"{ip}:{int(entry[1])}"


def slot_table(node: RedisNode) -> tuple[SlotRange, ...]:
    """CLUSTER SLOTS as this node sees it, normalised so tables compare equal."""
    rows: list[SlotRange] = []
    for entry in command(node, "CLUSTER", "SLOTS"):
        start, end, master, *replicas = entry
        rows.append(
            (int(start), int(end), _address(master), tuple(sorted(map(_address, replicas))))
        )
    return tuple(sorted(rows))


def split_slots(masters: int) -> list[tuple[int, int]]:
    """16384 slots in `masters` contiguous, near-equal ranges."""
    bounds = [CLUSTER_SLOTS * i // masters for i in range(masters + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(masters)]


def wait_for(
    check: Callable[[], list[str]], *, timeout: float, what: str, interval: float = 0.05
) -> None:
    """Call `check` until it reports no problems; raise ClusterNotReadyError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        problems = check()
        if not problems:
            return
        if time.monotonic() > deadline:
            raise ClusterNotReadyError(f"{what} within {timeout:g} s", problems=problems)
        time.sleep(interval)


def _handshake_problems(nodes: Sequence[RedisNode]) -> list[str]:
    problems = []
    for node in nodes:
        lines = command(node, "CLUSTER", "NODES").decode().splitlines()
        pending = [line for line in lines if "handshake" in line or "noaddr" in line]
        if len(lines) != len(nodes) or pending:
            problems.append(f"{node.address} knows {len(lines)} of {len(nodes)} nodes")
    return problems


REMEET_AFTER = 1.0
"""Seconds a cluster being formed may take to meet before the missing MEETs are sent again."""


def _known(node: RedisNode) -> set[str]:
    """The `host:port` of every node `node` lists, itself and handshakes included."""
    lines = command(node, "CLUSTER", "NODES").decode().splitlines()
    return {line.split()[1].split("@")[0] for line in lines if len(line.split()) > 1}


def meet_missing(nodes: Sequence[RedisNode]) -> int:
    """CLUSTER MEET again from each node to every node it does not list, not even as
    a handshake; how many were sent. A node drops a handshake that does not finish
    within its node timeout and nothing sends it again: with a 1 s node timeout on a
    loaded machine a node was left knowing only itself."""
    sent = 0
    for node in nodes:
        known = _known(node)
        for other in nodes:
            if other is not node and other.address not in known:
                command(node, "CLUSTER", "MEET", other.host, other.port)
                sent += 1
    return sent


def bootstrap_cluster(
    masters: Sequence[RedisNode],
    replica_of: Mapping[RedisNode, RedisNode],
    *,
    timeout: float,
) -> None:
    """Turn started, empty cluster-enabled nodes into one cluster.

    Distinct config epochs first (as redis-cli does, so no epoch collision has to be
    resolved), then ADDSLOTSRANGE evenly over the masters, CLUSTER MEET between
    every pair, and once everybody knows everybody, CLUSTER REPLICATE.
    """
    nodes = [*masters, *replica_of]
    for epoch, node in enumerate(nodes, start=1):
        command(node, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
    for node, (first, last) in zip(masters, split_slots(len(masters)), strict=True):
        command(node, "CLUSTER", "ADDSLOTSRANGE", first, last)
    for i, node in enumerate(nodes):  # every pair meets directly: no waiting for gossip
        for other in nodes[i + 1 :]:
            command(node, "CLUSTER", "MEET", other.host, other.port)
    met = [time.monotonic()]

    def check() -> list[str]:
        problems = _handshake_problems(nodes)
        if problems and time.monotonic() - met[0] >= REMEET_AFTER:
            meet_missing(nodes)
            met[0] = time.monotonic()
        return problems

    wait_for(check, timeout=timeout, what="nodes did not all meet")
    for replica, master in replica_of.items():
        command(replica, "CLUSTER", "REPLICATE", node_id(master))


def _node_problems(node: RedisNode, expected_nodes: int) -> list[str]:
    if not node.is_running:
        return [f"{node.address} is not running"]
    if node.is_paused:
        return [f"{node.address} is paused"]
    problems = []
    info = cluster_info(node)
    if info.get("cluster_state") != "ok":
        problems.append(f"{node.address} reports cluster_state:{info.get('cluster_state')}")
    if info.get("cluster_known_nodes") != str(expected_nodes):
        known = info.get("cluster_known_nodes")
        problems.append(f"{node.address} knows {known} of {expected_nodes} nodes")
    role = command(node, "ROLE")
    if role[0] == b"slave" and role[3] != b"connected":
        problems.append(f"replica {node.address} link to its master is {role[3].decode()}")
    return problems


def _table_problems(table: tuple[SlotRange, ...], replicas_per_master: int) -> list[str]:
    problems = []
    covered = sum(last - first + 1 for first, last, _, _ in table)
    if covered != CLUSTER_SLOTS:
        problems.append(f"only {covered} of {CLUSTER_SLOTS} slots are served")
    for first, last, master, replicas in table:
        if len(replicas) != replicas_per_master:
            problems.append(
                f"slots {first}-{last} on {master} have {len(replicas)} replicas, "
                f"expected {replicas_per_master}"
            )
    return problems


def cluster_problems(nodes: Sequence[RedisNode], replicas_per_master: int) -> list[str]:
    """What keeps the cluster from being ready; [] when it is.

    Ready means: every node runs, reports cluster_state:ok and knows every node,
    every replica's link is up, and every node returns the same CLUSTER SLOTS,
    which covers all 16384 slots with the expected number of replicas.
    """
    problems: list[str] = []
    tables: dict[str, tuple[SlotRange, ...]] = {}
    for node in nodes:
        try:
            found = _node_problems(node, len(nodes))
            if reachable(node):
                tables[node.address] = slot_table(node)
        except redis.RedisError as exc:
            found = [f"{node.address} did not answer: {exc}"]
        problems += found
    distinct = set(tables.values())
    if len(distinct) > 1:
        views = "; ".join(
            f"{address} sees " + ", ".join(f"{a}-{b}@{m}" for a, b, m, _ in table)
            for address, table in tables.items()
        )
        problems.append(f"nodes disagree on the slot owners: {views}")
    elif distinct:
        problems += _table_problems(distinct.pop(), replicas_per_master)
    return problems
