"""What a write and a read hand back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from .verdict import Mode, Observation, Reason, Status

if TYPE_CHECKING:
    from .repair.base import RepairOutcome

__all__ = ["ReadResult", "Receipt"]

K = TypeVar("K", bytes, str)


@dataclass(frozen=True, slots=True)
class Receipt:
    """An acknowledged write: every key took it (or already held a newer write).

    `superseded` lists keys where a newer write was already stored, so this one
    was kept out by the guard; `atomic` is True when the write went to one slot
    in one server-side step; `deleted` is True for a delete (tombstones).
    """

    group: bytes
    version: int
    token: str
    keys: tuple[bytes, ...]
    mode: Mode
    atomic: bool = False
    superseded: tuple[bytes, ...] = ()
    deleted: bool = False

    @property
    def stamp(self) -> str:
        return f"{self.version}:{self.token}"


@dataclass(frozen=True, slots=True)
class ReadResult(Generic[K]):
    """One group read.

    `consistent` is True when `values` can be trusted as one whole: every key
    came from the write `token`/`version` (status CONSISTENT), or the group does
    not exist at all (status NOT_FOUND, every value None). A repaired read is
    consistent too (`repaired` says so); a read whose repair was queued is not.
    """

    group: bytes
    status: Status
    values: Mapping[K, bytes | None]
    version: int | None = None
    token: str | None = None
    attempts: int = 1
    reason: Reason | None = None
    repaired: bool = False
    queued: bool = False
    observation: Observation | None = field(default=None, repr=False, compare=False)
    repair: RepairOutcome | None = field(default=None, repr=False, compare=False)

    @property
    def consistent(self) -> bool:
        return self.status is Status.CONSISTENT or self.status is Status.NOT_FOUND

    @property
    def found(self) -> bool:
        return self.status is not Status.NOT_FOUND

    def __getitem__(self, key: K) -> bytes | None:
        return self.values[key]
