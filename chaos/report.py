"""What the checker reports: violations, writes lost to a data-loss fault, counts."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from .history import WriteId
from .index import Stamp

__all__ = ["CheckReport", "LostWrite", "Violation"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule, with the operations that show it."""

    kind: str
    message: str
    ops: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LostWrite:
    """An acknowledged write taken by the data-loss fault (its server restarted empty)."""

    write: WriteId
    op: str
    group: str
    stamp: Stamp
    acknowledged_at: float
    shard: str
    keys_on_shard: tuple[str, ...]


@dataclass
class CheckReport:
    violations: list[Violation] = field(default_factory=list)
    lost_to_fault: list[LostWrite] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, int]:
        return dict(collections.Counter(v.kind for v in self.violations))
