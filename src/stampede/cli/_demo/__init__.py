"""The runnable demonstration behind `stampede demo` (private: the command is its
interface).

Concurrent writers on a keyspace of users (profile + settings) and orders
(header + items) whose parts live on different shards; injected faults (writers
that die between shards, a primary that stops answering for a moment); readers
that detect torn groups and repair them with `NewestWins`, `Refetch` (from an
in-memory database) or `Enqueue` (drained by an in-process worker); and a final
`scan_groups` that must find no torn group left.

"""

from .engine import Demo as Demo
from .engine import DemoConfig as DemoConfig
from .engine import run_demo as run_demo
from .stats import STRATEGIES as STRATEGIES
from .stats import Counters as Counters
from .stats import Summary as Summary

__all__ = ["STRATEGIES", "Counters", "Demo", "DemoConfig", "Summary", "run_demo"]
