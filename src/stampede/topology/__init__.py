"""Where keys live and how plans reach them: `Shards` and `Cluster`."""

from .base import Topology as Topology
from .base import WriteOutcome as WriteOutcome
from .cluster import Cluster as Cluster
from .shards import Shards as Shards

__all__ = ["Cluster", "Shards", "Topology", "WriteOutcome"]
