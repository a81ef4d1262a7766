"""The protocols stampede is built around, with every member declared.

- `VersionSource`: where a write's version comes from (`Counter`, `HybridClock`,
  or the application's own);
- `RepairStrategy` and the `RepairContext` it is given: how a group that stays
  torn is made whole (`NewestWins`, `Refetch`, `Enqueue`, or the application's own);
- `HasTopology`: anything that works over a topology (a `Stampede`);
- `PayloadCodec`: how a typed group stores a part's model in the envelope's payload.

Nothing here talks to Redis or imports a Redis client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .results import RepairOutcome
    from .topology._base import Topology
    from .verdict import Mode, Observation, Verdict

__all__ = [
    "DEFAULT_GRACE",
    "HasTopology",
    "PayloadCodec",
    "RepairContext",
    "RepairStrategy",
    "VersionSource",
]

DEFAULT_GRACE = 300.0
"""Seconds a repair's tombstones keep late older writes out (`Options.tombstone_grace`)."""


@runtime_checkable
class VersionSource(Protocol):
    """Gives each logical write of a group a version."""

    @property
    def needs_round_trip(self) -> bool:
        """True when `next_version` talks to Redis."""
        ...

    async def next_version(self, group: bytes, topology: Topology) -> int:
        """A version for a new write of `group`, newer than this source gave before."""
        ...

    def observe(self, version: int) -> None:
        """Learn of a version seen elsewhere (a read or a lost race), to stay ahead."""
        ...


@dataclass(frozen=True, slots=True)
class RepairContext:
    """Where and how a repair writes.

    `ttl` is the expiry for a group whose writes carried none that can be kept
    (a group with no stamp at all); `grace` how long tombstones live.
    """

    topology: Topology
    mode: Mode
    versions: VersionSource
    ttl: float | None = None
    grace: float = DEFAULT_GRACE


@runtime_checkable
class RepairStrategy(Protocol):
    """Turns a torn observation into a whole group (or a queued job)."""

    @property
    def name(self) -> str: ...

    async def repair(
        self, ctx: RepairContext, obs: Observation, verdict: Verdict
    ) -> RepairOutcome: ...


@runtime_checkable
class HasTopology(Protocol):
    """Anything that works over a topology (a `Stampede`): the co-located helpers
    accept it in place of the topology itself."""

    @property
    def topology(self) -> Topology:
        """The topology its reads and writes go through."""
        ...


M = TypeVar("M", bound="BaseModel")


@runtime_checkable
class PayloadCodec(Protocol):
    """How a `TypedGroup` turns a part's pydantic model into the payload stored inside
    the envelope, and back (`JsonCodec` by default)."""

    def encode(self, value: BaseModel) -> bytes:
        """The payload for `value`."""
        ...

    def decode(self, model: type[M], payload: bytes) -> M:
        """`payload` as a `model`; pydantic's `ValidationError` when it does not fit
        (the group reports it as `ModelValidationError`, naming the key)."""
        ...
