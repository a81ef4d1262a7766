"""Real Redis (or Valkey) servers for tests: stampede's own and its users'.

`RedisNode` is one server process (`$STAMPEDE_TEST_SERVER` picks redis-server,
the Valkey bundled in `stampede-redis[server]`, or a path: `default_server()`);
`LocalPrimaries` runs independent primaries, `LocalCluster` a real Redis Cluster,
`LocalSentinels` primaries with replicas watched by Sentinel processes.
The pytest plugin (`stampede.testing.plugin`, loaded automatically) shares one of
each per session as the `stampede_primaries` and `stampede_cluster` fixtures. `RedisProxy` sits in
front of a server and loses the replies you pick. `drop_kept` forgets the kept
versions of keys, as if their grace window had passed. See docs/testing.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the harness needs redis-py: loaded on first use (see _WHERE)
    from .._kept import drop_kept as drop_kept
    from .cluster import LocalCluster as LocalCluster
    from .docker import DockerCluster as DockerCluster
    from .docker import DockerNode as DockerNode
    from .docker import DockerPrimaries as DockerPrimaries
    from .errors import ClusterNotReadyError as ClusterNotReadyError
    from .errors import HarnessError as HarnessError
    from .errors import ServerStartError as ServerStartError
    from .migration import SlotMigration as SlotMigration
    from .node import NodeOptions as NodeOptions
    from .node import RedisNode as RedisNode
    from .primaries import LocalPrimaries as LocalPrimaries
    from .proxy import ProxyRule as ProxyRule
    from .proxy import RedisProxy as RedisProxy
    from .sentinel import LocalSentinels as LocalSentinels
    from .sentinel import SentinelNode as SentinelNode
    from .servers import SERVER_ENV as SERVER_ENV
    from .servers import ServerBinary as ServerBinary
    from .servers import ServerNotFoundError as ServerNotFoundError
    from .servers import default_server as default_server
    from .servers import find_server as find_server

__all__ = [
    "SERVER_ENV",
    "ClusterNotReadyError",
    "DockerCluster",
    "DockerNode",
    "DockerPrimaries",
    "HarnessError",
    "LocalCluster",
    "LocalPrimaries",
    "LocalSentinels",
    "NodeOptions",
    "ProxyRule",
    "RedisNode",
    "RedisProxy",
    "SentinelNode",
    "ServerBinary",
    "ServerNotFoundError",
    "ServerStartError",
    "SlotMigration",
    "default_server",
    "drop_kept",
    "find_server",
]

_WHERE: dict[str, tuple[str, str]] = {
    "drop_kept": (".._kept", "drop_kept"),
    "LocalCluster": (".cluster", "LocalCluster"),
    "DockerCluster": (".docker", "DockerCluster"),
    "DockerNode": (".docker", "DockerNode"),
    "DockerPrimaries": (".docker", "DockerPrimaries"),
    "ClusterNotReadyError": (".errors", "ClusterNotReadyError"),
    "HarnessError": (".errors", "HarnessError"),
    "ServerStartError": (".errors", "ServerStartError"),
    "SlotMigration": (".migration", "SlotMigration"),
    "NodeOptions": (".node", "NodeOptions"),
    "RedisNode": (".node", "RedisNode"),
    "LocalPrimaries": (".primaries", "LocalPrimaries"),
    "ProxyRule": (".proxy", "ProxyRule"),
    "RedisProxy": (".proxy", "RedisProxy"),
    "LocalSentinels": (".sentinel", "LocalSentinels"),
    "SentinelNode": (".sentinel", "SentinelNode"),
    "SERVER_ENV": (".servers", "SERVER_ENV"),
    "ServerBinary": (".servers", "ServerBinary"),
    "ServerNotFoundError": (".servers", "ServerNotFoundError"),
    "default_server": (".servers", "default_server"),
    "find_server": (".servers", "find_server"),
}
"""Where each public name lives: imported when first asked for, so that the pytest
plugin (loaded into every project that installs stampede) and `import
stampede.testing` need no redis-py until a server is actually wanted."""


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0], __name__), where[1])
    globals()[name] = value
    return value
