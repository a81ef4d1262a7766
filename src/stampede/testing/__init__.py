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
