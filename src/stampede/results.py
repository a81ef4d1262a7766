"""What a write, a read and a repair hand back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, Generic, TypeVar

from .verdict import Mode, Observation, Reason, Status

__all__ = [
    "AtomicRead",
    "GuardCode",
    "Health",
    "ReadResult",
    "Receipt",
    "RepairAction",
    "RepairOutcome",
    "TransactionReceipt",
]

K = TypeVar("K", bytes, str)


@dataclass(frozen=True, slots=True)
class Receipt:
    """An acknowledged write: every key took it (or already held a newer write).

    `superseded` lists keys where a newer write was already stored, so this one
    was kept out by the guard; `atomic` is True when the write went to one slot
    in one server-side step; `deleted` is True for a delete (tombstones). With
    durability asked (`Durability`), `replicas` maps each shard to the replicas
    that acknowledged the write there (its record included) and `durable` says
    whether every shard reached the number asked; both are empty / None otherwise.
    """

    group: bytes
    version: int
    token: str
    keys: tuple[bytes, ...]
    mode: Mode
    atomic: bool = False
    superseded: tuple[bytes, ...] = ()
    deleted: bool = False
    replicas: Mapping[str, int] = field(default_factory=dict)
    durable: bool | None = None

    @property
    def stamp(self) -> str:
        return f"{self.version}:{self.token}"


def new_receipt(
    group: bytes,
    version: int,
    token: str,
    keys: tuple[bytes, ...],
    mode: Mode,
    atomic: bool,
    superseded: tuple[bytes, ...],
    deleted: bool,
    replicas: Mapping[str, int],
    durable: bool | None,
) -> Receipt:
    """`Receipt(...)` with every field given, set through its slots: the dataclass's
    frozen `__init__` pays an `object.__setattr__` per field, and a write makes one
    receipt per call. The same object either way (a test compares them)."""
    receipt: Receipt = _new(Receipt)
    _group(receipt, group)
    _version(receipt, version)
    _token(receipt, token)
    _keys(receipt, keys)
    _mode(receipt, mode)
    _atomic(receipt, atomic)
    _superseded(receipt, superseded)
    _deleted(receipt, deleted)
    _replicas(receipt, replicas)
    _durable(receipt, durable)
    return receipt


def _slot_setters(cls: type) -> tuple[Any, ...]:
    """Each field's slot setter, in the order of `cls.__slots__` (a slotted dataclass's
    fields): a frozen dataclass refuses `obj.field = ...`, these do not."""
    slots: tuple[str, ...] = vars(cls)["__slots__"]
    return tuple(vars(cls)[name].__set__ for name in slots)


_new = object.__new__
(_group, _version, _token, _keys, _mode, _atomic, _superseded, _deleted, _replicas, _durable) = (
    _slot_setters(Receipt)
)


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

    @classmethod
    def judged(
        cls,
        group: bytes,
        status: Status,
        values: Mapping[K, bytes | None],
        version: int | None,
        token: str | None,
        attempts: int,
        reason: Reason | None,
        observation: Observation,
    ) -> ReadResult[K]:
        """`ReadResult(group, status, values, version, token, attempts, reason,
        observation=observation)`, without the dataclass's __init__ (every read makes
        one): the same fields, set through the slots."""
        result: ReadResult[K] = _new_result(cls)
        _set_group(result, group)
        _set_status(result, status)
        _set_values(result, values)
        _set_version(result, version)
        _set_token(result, token)
        _set_attempts(result, attempts)
        _set_reason(result, reason)
        _set_repaired(result, False)
        _set_queued(result, False)
        _set_observation(result, observation)
        _set_repair(result, None)
        return result


_new_result = ReadResult.__new__
(
    _set_group, _set_status, _set_values, _set_version, _set_token, _set_attempts, _set_reason,
    _set_repaired, _set_queued, _set_observation, _set_repair,
) = _slot_setters(ReadResult)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TransactionReceipt:
    """A committed read-atomic transaction.

    `superseded` lists keys where a newer write was already current (this one was
    kept out there); `pending` keys whose commit was not acknowledged: the
    transaction is committed (every prepare was), `read_atomic` returns it whole,
    and the next commit, transaction or repair of those keys completes it, but a
    plain GET may show the older value until then. `atomic` is True when every
    key shared one slot and the transaction was one server-side step. With
    durability asked (`Durability`), `replicas` maps each shard to the fewest
    replicas that acknowledged a commit there and `durable` says whether every
    shard reached the number asked (a prepare that fell short aborted it).
    """

    version: int
    token: str
    keys: tuple[bytes, ...]
    atomic: bool = False
    superseded: tuple[bytes, ...] = ()
    pending: tuple[bytes, ...] = ()
    deleted: tuple[bytes, ...] = ()
    replicas: Mapping[str, int] = field(default_factory=dict)
    durable: bool | None = None

    @property
    def stamp(self) -> str:
        return f"{self.version}:{self.token}"


@dataclass(frozen=True, slots=True)
class AtomicRead(Generic[K]):
    """A read-atomic read: no value of a transaction without its siblings' values.

    `values` maps each key to its payload (None when missing or deleted);
    `stamps` to the (version, token) of the write it came from (None when missing,
    or a value no stampede write stamped); `rounds` is 1, or 2 when a second round
    fetched versions the first one missed.
    """

    values: Mapping[K, bytes | None]
    rounds: int
    stamps: Mapping[K, tuple[int, str] | None] = field(default_factory=dict)
    attempts: int = 1

    def __getitem__(self, key: K) -> bytes | None:
        return self.values[key]


class RepairAction(StrEnum):
    REWRITTEN = "rewritten"  # the whole group written again under one stamp
    ROLLED_FORWARD = "rolled_forward"  # data was whole: only the commit record was written
    DELETED = "deleted"  # the source of truth says the entity is gone
    ALREADY_CONSISTENT = "already_consistent"  # a re-read found nothing to do
    LOST_RACE = "lost_race"  # a newer write got in first; the group was re-read
    QUEUED = "queued"  # handed to the repair stream for the worker


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    """What a repair did, and the group's payloads afterwards.

    `consistent` is True when `values` are one whole write (repaired, rolled
    forward, or found consistent on a re-read); a queued repair returns the
    best-effort merge with `consistent` False. `detail` adds facts: `job` for a
    queued repair; `undecided`, the keys (comma-separated) where a transaction is
    still committing, for a repair that left the group to it (`lost_race`).
    """

    group: bytes
    action: RepairAction
    reason: Reason | None
    values: dict[bytes, bytes | None]
    consistent: bool
    stamp: tuple[int, str] | None = None
    detail: dict[str, str] = field(default_factory=dict)


class GuardCode(IntEnum):
    """What a guarded write did to one key (every stamped write goes through the guard).

    Codes of 1 and above mean the key now holds the write (or already did); 0 that a
    newer write is stored and this one was kept out; below 0 that the stored value
    cannot be ordered against the write, so nothing was written.
    """

    KEPT = 0
    """A newer write (by version, then token) is stored; this one was kept out."""
    WRITTEN = 1
    """The write replaced an older value (or none)."""
    SAME = 2
    """The key already held this very write (a resend): nothing to do."""
    WRONGTYPE = -1
    """The key holds another Redis type (a list, a hash...)."""
    MIXED = -2
    """The stored version is of the other kind (clock vs sequence): not comparable."""
    FUTURE = -3
    """The stored clock version is further ahead than the writer's clock allows."""
    FOREIGN = -4
    """The stored value is not an envelope (another program wrote it)."""
    WITHHELD = -6
    """Not written: another key of the same write refused it in the same call (a
    write whose keys share one call is all or nothing)."""
    EXPIRED = -7
    """Not written: the write's expiry instant had already passed by the server's
    clock (the writer's clock is behind by more than the write's ttl)."""


@dataclass(frozen=True, slots=True)
class Health:
    """What `Stampede.ping()` found: each shard's PING round trip in seconds, or the
    error that shard answered with (or the timeout). `ok` when every shard answered;
    for a readiness endpoint."""

    latency: Mapping[str, float]
    errors: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return bool(self.latency) and not self.errors
