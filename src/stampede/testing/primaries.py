"""Independent Redis primaries: the servers behind client-side sharding."""

from __future__ import annotations

from typing import Unpack

from ._admin import command
from ._lifecycle import Started
from .node import NodeOptions, RedisNode, stop_nodes

__all__ = ["LocalPrimaries"]


class LocalPrimaries(Started):
    """`n` unrelated redis-server processes, each on its own free port."""

    def __init__(self, n: int = 3, **node_kwargs: Unpack[NodeOptions]) -> None:
        if n < 1:
            raise ValueError(f"need at least one primary, not {n}")
        self._node_kwargs = node_kwargs
        self.nodes: list[RedisNode] = [self._make_node() for _ in range(n)]

    def _make_node(self) -> RedisNode:
        return RedisNode(**self._node_kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.nodes!r}>"

    @property
    def urls(self) -> list[str]:
        """One `redis://host:port` URL per primary, in node order."""
        return [node.url for node in self.nodes]

    def start(self) -> None:
        """Start every node; if one fails, stop the others and raise."""
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node and remove their directories."""
        stop_nodes(self.nodes)

    def flushall(self) -> None:
        """FLUSHALL on every node."""
        for node in self.nodes:
            command(node, "FLUSHALL")

    def heal(self) -> None:
        """Resume paused nodes and restart killed ones (same port, empty)."""
        for node in self.nodes:
            if node.is_paused:
                node.resume()
            elif not node.is_running:
                node.restart()
