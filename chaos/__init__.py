"""Fault injection and an independent consistency check for stampede.

- `History` records operations as JSON lines; `RecordingStampede` wraps a
  `Stampede` so a workload uses the normal API and every write, read and repair
  is recorded.
- `FaultyTopology` wraps a `Topology` and crashes writers at each crash point.
- `check(events)` judges a history from its JSON lines alone.
- `python -m chaos` runs the scenarios (`scenarios.py`) on independent
  primaries and on a cluster, and fuzzes the decoders (`fuzz.py`, needs hypothesis).

See docs/reliability.md.
"""

from .checker import CheckReport as CheckReport
from .checker import LostWrite as LostWrite
from .checker import Violation as Violation
from .checker import check as check
from .faults import Crash as Crash
from .faults import CrashPoint as CrashPoint
from .faults import CrashStyle as CrashStyle
from .faults import EveryNth as EveryNth
from .faults import FaultyTopology as FaultyTopology
from .faults import InjectedCrash as InjectedCrash
from .history import History as History
from .history import load_events as load_events
from .history import parse_payload as parse_payload
from .history import payload_of as payload_of
from .recording import CHAOS_REPAIR as CHAOS_REPAIR
from .recording import RecordingRepair as RecordingRepair
from .recording import RecordingStampede as RecordingStampede

__all__ = [
    "CHAOS_REPAIR",
    "CheckReport",
    "Crash",
    "CrashPoint",
    "CrashStyle",
    "EveryNth",
    "FaultyTopology",
    "History",
    "InjectedCrash",
    "LostWrite",
    "RecordingRepair",
    "RecordingStampede",
    "Violation",
    "check",
    "load_events",
    "parse_payload",
    "payload_of",
]
