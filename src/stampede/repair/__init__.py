"""Repair: strategies for groups that stay torn, the repair stream and its worker.

- strategies: `NewestWins`, `Refetch` (with a loader returning `Loaded`), `Enqueue`;
- the stream: `RepairQueue`, its `Job`s, the consumer group `CONSUMER_GROUP` and the
  dead-letter stream `DEAD_LETTER_STREAM`;
- the worker: `Worker`, its `RetryBackoff`, `WorkerStats`, `StrategyLifecycle` hooks
  and `serve_metrics`;
- `sweep_versions`: collect the version hashes read-atomic transactions leave
  (the worker runs it every `--sweep-interval`).
"""

from .._txn.sweep import sweep as sweep_versions
from ..results import RepairAction as RepairAction
from ..results import RepairOutcome as RepairOutcome
from ..typing import RepairContext as RepairContext
from ..typing import RepairStrategy as RepairStrategy
from ._queue import CONSUMER_GROUP as CONSUMER_GROUP
from ._queue import DEAD as DEAD_LETTER_STREAM
from ._queue import Job as Job
from ._queue import RepairQueue as RepairQueue
from ._strategies import Enqueue as Enqueue
from ._strategies import Loaded as Loaded
from ._strategies import NewestWins as NewestWins
from ._strategies import Refetch as Refetch
from ._worker import RetryBackoff as RetryBackoff
from ._worker import StrategyLifecycle as StrategyLifecycle
from ._worker import Worker as Worker
from ._worker import WorkerStats as WorkerStats
from ._worker import serve_metrics as serve_metrics

__all__ = [
    "CONSUMER_GROUP",
    "DEAD_LETTER_STREAM",
    "Enqueue",
    "Job",
    "Loaded",
    "NewestWins",
    "Refetch",
    "RepairAction",
    "RepairContext",
    "RepairOutcome",
    "RepairQueue",
    "RepairStrategy",
    "RetryBackoff",
    "StrategyLifecycle",
    "Worker",
    "WorkerStats",
    "serve_metrics",
    "sweep_versions",
]
