"""A real Redis Cluster of local redis-server processes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Unpack

from ._admin import (
    bootstrap_cluster,
    cluster_problems,
    command,
    is_master,
    reachable,
    slot_table,
    wait_for,
)
from ._lifecycle import Started
from .migration import SlotMigration
from .node import NodeOptions, RedisNode, stop_nodes

__all__ = ["READY_TIMEOUT", "LocalCluster"]


READY_TIMEOUT = 30.0


class LocalCluster(Started):
    """`masters` masters sharing the 16384 slots evenly, each with `replicas` replicas.

    `replicas` counts replicas *per master*, as `redis-cli --cluster-replicas` does:
    `LocalCluster(3, 1)` runs six nodes. `start()` returns only when every node
    reports cluster_state:ok and all nodes return the same CLUSTER SLOTS.

    Node timeout is 2 s, so a paused or killed master is flagged failing after about
    2 s; pass e.g. `extra_args=["--cluster-node-timeout", "5000"]` to change it (and
    `["--cluster-require-full-coverage", "no"]` to keep the other slots serving
    while one master is down).
    """

    def __init__(
        self, masters: int = 3, replicas: int = 0, **node_kwargs: Unpack[NodeOptions]
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError(f"need masters >= 1 and replicas >= 0, not {masters}, {replicas}")
        self._node_kwargs = node_kwargs
        self.replicas_per_master = replicas
        self.masters: list[RedisNode] = [self._make_node() for _ in range(masters)]
        self.replicas: list[RedisNode] = [self._make_node() for _ in range(masters * replicas)]
        self.nodes: list[RedisNode] = [*self.masters, *self.replicas]
        self._migrations: dict[int, SlotMigration] = {}

    def _make_node(self) -> RedisNode:
        return RedisNode(cluster_enabled=True, **self._node_kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.nodes!r}>"

    @property
    def url(self) -> str:
        """The first master's URL: a startup node for cluster clients."""
        return self.masters[0].url

    @property
    def urls(self) -> list[str]:
        """Every node's URL, masters first."""
        return [node.url for node in self.nodes]

    # -- lifecycle -------------------------------------------------------------------

    def start(self, *, timeout: float = READY_TIMEOUT) -> None:
        """Start the nodes, form the cluster, and wait until it is ready."""
        try:
            for node in self.nodes:
                node.start()
            replica_of = {
                replica: self.masters[i // self.replicas_per_master]
                for i, replica in enumerate(self.replicas)
            }
            bootstrap_cluster(self.masters, replica_of, timeout=timeout)
            self.wait_until_ok(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (replicas first) and remove their directories."""
        self._migrations.clear()
        stop_nodes(self.nodes[::-1])

    def wait_until_ok(self, timeout: float = 10.0) -> None:
        """Wait until every node says cluster_state:ok and all agree on the slot owners.

        Raises `ClusterNotReadyError` listing what was still wrong at the deadline.
        """
        wait_for(
            lambda: cluster_problems(self.nodes, self.replicas_per_master),
            timeout=timeout,
            what="the cluster did not become ready",
        )

    def flushall(self) -> None:
        """FLUSHALL on every current master, then wait for replicas to apply it."""
        for node in self.nodes:
            if is_master(node):
                command(node, "FLUSHALL")
                if self.replicas_per_master:
                    command(node, "WAIT", self.replicas_per_master, 5000)

    def heal(self, *, timeout: float = READY_TIMEOUT) -> None:
        """Resume paused nodes, restart killed ones, finish open migrations, wait until ok.

        A restarted node keeps its nodes.conf and rejoins with its id. A master that
        was down takes about two seconds before it reports cluster_state:ok again.
        """
        for node in self.nodes:
            if node.is_paused:
                node.resume()
        for node in self.nodes:
            if not node.is_running:
                node.restart()
        for slot in list(self._migrations):
            self.finish_migration(slot, timeout=timeout)
        self.wait_until_ok(timeout)

    # -- slots -----------------------------------------------------------------------

    def master_for_slot(self, slot: int) -> RedisNode:
        """The node that serves `slot`, as the first reachable node reports it."""
        by_address = {node.address: node for node in self.nodes}
        for node in self.nodes:
            if reachable(node):
                for first, last, master, _ in slot_table(node):
                    if first <= slot <= last:
                        return by_address[master]
                break
        raise LookupError(f"no reachable node reports an owner for slot {slot}")

    def begin_migration(self, slot: int, target: RedisNode) -> SlotMigration:
        """Start moving `slot` to `target`: IMPORTING on it, MIGRATING on the owner.

        While the migration is open, the owner answers ASK for keys it no longer
        holds. Move keys with `move_keys` and complete it with `finish_migration`.
        """
        if slot in self._migrations:
            raise RuntimeError(f"slot {slot} is already migrating: {self._migrations[slot]!r}")
        migration = SlotMigration(
            slot, source=self.master_for_slot(slot), target=target, nodes=self.nodes
        )
        migration.begin()
        self._migrations[slot] = migration
        return migration

    def move_keys(self, slot: int, keys: Iterable[bytes | str] | None = None) -> int:
        """Move some keys (default: all) of a slot begun with `begin_migration`."""
        return self._open(slot).move_keys(keys)

    def finish_migration(self, slot: int, *, timeout: float = 10.0) -> None:
        """Move the rest of the slot, assign it to the target on every master, wait until ok.

        From now on the old owner answers MOVED for the slot's keys.
        """
        self._open(slot).finish()
        del self._migrations[slot]
        self.wait_until_ok(timeout)

    def migrate_slot(self, slot: int, target: RedisNode) -> None:
        """Migrate `slot` with all its keys to `target` in one call."""
        self.begin_migration(slot, target)
        self.finish_migration(slot)

    def _open(self, slot: int) -> SlotMigration:
        try:
            return self._migrations[slot]
        except KeyError:
            raise RuntimeError(f"slot {slot} is not migrating: call begin_migration") from None
