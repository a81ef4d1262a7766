"""Where keys live and how plans reach them: `Shards` and `Cluster`, on stampede's own
connections (RESP2 over asyncio, parsed by hiredis)."""

from ._discovery import AddressRemap as AddressRemap
from .base import Topology as Topology
from .base import WriteOutcome as WriteOutcome
from .checks import cluster_mode as cluster_mode
from .cluster import Cluster as Cluster
from .shards import Shards as Shards

__all__ = ["AddressRemap", "Cluster", "Shards", "Topology", "WriteOutcome", "cluster_mode"]
