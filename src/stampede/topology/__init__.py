"""Where keys live and how plans reach them: `Shards` and `Cluster`, on stampede's own
connections (RESP2 over asyncio, parsed by hiredis)."""

from ..typing import Topology as Topology
from ._base import WriteOutcome as WriteOutcome
from ._checks import cluster_mode as cluster_mode
from ._cluster import Cluster as Cluster
from ._discovery import AddressRemap as AddressRemap
from ._sentinel import SentinelShards as SentinelShards
from ._shards import Shards as Shards

__all__ = [
    "AddressRemap",
    "Cluster",
    "SentinelShards",
    "Shards",
    "Topology",
    "WriteOutcome",
    "cluster_mode",
]
