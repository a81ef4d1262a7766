"""Primaries with replicas, watched by Redis Sentinel: the usual self-managed set-up
for client-side sharding (`stampede.connect(sentinels=..., services=...)`).

Sentinels are `redis-server <config> --sentinel` processes (valkey-server runs the
same way), so no `redis-sentinel` binary is needed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Unpack

from redis.exceptions import RedisError

from ._admin import command
from ._lifecycle import Started
from .errors import ServerStartError
from .node import NodeOptions, RedisNode, stop_nodes

__all__ = ["LocalSentinels", "SentinelNode"]


class SentinelNode(RedisNode):
    """One Sentinel process watching `monitors` (service name -> its primary)."""

    def __init__(
        self,
        monitors: dict[str, RedisNode],
        *,
        quorum: int = 1,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        **node_kwargs: Unpack[NodeOptions],
    ) -> None:
        super().__init__(**node_kwargs)
        self.monitors = monitors
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def _arguments(self, port: int) -> list[str]:
        config = self.directory / "sentinel.conf"
        lines = [f"port {port}"]
        for name, primary in self.monitors.items():
            lines += [
                f"sentinel monitor {name} {primary.host} {primary.port} {self.quorum}",
                f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
                f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {name} 1",
            ]
        config.write_text("\n".join(lines) + "\n")  # Sentinel rewrites it as it learns
        return [str(config), "--sentinel", "--bind", self.host, "--dir", str(self.directory)]


class LocalSentinels(Started):
    """`services` primaries, each with `replicas` replicas, and `sentinels` Sentinels
    watching all of them (quorum: a majority of the Sentinels). A killed primary is
    seen down after `down_after_ms` and its replica promoted a second or two later."""

    def __init__(
        self,
        services: int = 2,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        **node_kwargs: Unpack[NodeOptions],
    ) -> None:
        if services < 1 or replicas < 1 or sentinels < 1:
            raise ValueError("need at least one service, one replica each and one Sentinel")
        self.names = [f"shard-{chr(ord('a') + i)}" for i in range(services)]
        self.primaries = [RedisNode(**node_kwargs) for _ in self.names]
        self.replicas: list[RedisNode] = []
        self._replicas_per = replicas
        self._node_kwargs = node_kwargs
        self._down_after_ms = down_after_ms
        self._sentinel_count = sentinels
        self.sentinels: list[SentinelNode] = []

    @property
    def sentinel_urls(self) -> list[str]:
        return [s.url for s in self.sentinels]

    @property
    def nodes(self) -> list[RedisNode]:
        return [*self.primaries, *self.replicas, *self.sentinels]

    def start(self, *, timeout: float = 30.0) -> None:
        """Start the primaries, their replicas and the Sentinels; return once every
        Sentinel knows every primary and its replicas."""
        try:
            for primary in self.primaries:
                primary.start()
            for primary in self.primaries:
                for _ in range(self._replicas_per):
                    args = [*self._node_kwargs.get("extra_args", ())]
                    args += ["--replicaof", primary.host, str(primary.port)]
                    kwargs: NodeOptions = {**self._node_kwargs, "extra_args": args}
                    replica = RedisNode(**kwargs)
                    replica.start()
                    self.replicas.append(replica)
            monitors = dict(zip(self.names, self.primaries, strict=True))
            quorum = self._sentinel_count // 2 + 1
            for _ in range(self._sentinel_count):
                sentinel = SentinelNode(
                    monitors, quorum=quorum, down_after_ms=self._down_after_ms, **self._node_kwargs
                )
                sentinel.start()
                self.sentinels.append(sentinel)
            self.wait_until_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_until_ready(self, timeout: float = 30.0) -> None:
        """Wait until every Sentinel sees every service with its replicas."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._ready(s, name) for s in self.sentinels for name in self.names):
                return
            time.sleep(0.05)
        raise ServerStartError(f"the Sentinels did not learn the services in {timeout:g} s")

    def _ready(self, sentinel: SentinelNode, name: str) -> bool:
        try:
            replicas = command(sentinel, "SENTINEL", "replicas", name)
            others = command(sentinel, "SENTINEL", "sentinels", name)
        except (RedisError, OSError):  # not up yet: ask again
            return False
        return len(replicas) >= self._replicas_per and len(others) >= len(self.sentinels) - 1

    def primary_of(self, name: str) -> tuple[str, int]:
        """Where the Sentinels say the service's primary is now."""
        host, port = command(self.sentinels[0], "SENTINEL", "get-master-addr-by-name", name)
        return str(host if isinstance(host, str) else host.decode()), int(port)

    def node_at(self, address: tuple[str, int]) -> RedisNode:
        """The data node listening at `address`."""
        for node in [*self.primaries, *self.replicas]:
            if (node.host, node.port) == address:
                return node
        raise KeyError(address)

    def stop(self) -> None:
        stop_nodes([*self.sentinels, *self.replicas, *self.primaries])

    def servers(self) -> Sequence[RedisNode]:
        return [*self.primaries, *self.replicas]
