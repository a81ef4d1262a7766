"""Repair: strategies for groups that stay torn, the repair stream and its worker."""

from ..results import RepairAction as RepairAction
from ..results import RepairOutcome as RepairOutcome
from ..typing import RepairContext as RepairContext
from ..typing import RepairStrategy as RepairStrategy
from .queue import Job as Job
from .queue import RepairQueue as RepairQueue
from .strategies import Enqueue as Enqueue
from .strategies import Loaded as Loaded
from .strategies import NewestWins as NewestWins
from .strategies import Refetch as Refetch

__all__ = [
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
]
