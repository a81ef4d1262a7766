"""The protocols stampede is built around, with every member declared.

- `VersionSource`: where a write's version comes from (`Counter`, `HybridClock`,
  or the application's own);
- `RepairStrategy` and the `RepairContext` it is given: how a group that stays
  torn is made whole (`NewestWins`, `Refetch`, `Enqueue`, or the application's own);
- `Topology`: where keys live and how one round trip per shard reaches them
  (`Shards`, `Cluster`, the in-memory one of `stampede.testing`);
- `HasTopology`: anything that works over a topology (a `Stampede`);
- `PayloadCodec`: how a typed group stores a part's model in the envelope's payload.

Nothing here talks to Redis or imports a Redis client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NotRequired, Protocol, TypedDict, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Unpack

    from pydantic import BaseModel

    from ._lua import Script
    from .keys import SlotMap
    from .results import RepairOutcome
    from .topology._base import WriteOutcome
    from .topology._node_ops import Body, Command
    from .verdict import Mode, Observation, Verdict

__all__ = [
    "DEFAULT_GRACE",
    "GuardStamp",
    "HasTopology",
    "PayloadCodec",
    "RepairContext",
    "RepairStrategy",
    "Topology",
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
    (a group with no stamp at all); `grace` how long tombstones live;
    `version_grace` how long a transaction's replaced versions stay readable.
    """

    topology: Topology
    mode: Mode
    versions: VersionSource
    ttl: float | None = None
    grace: float = DEFAULT_GRACE
    version_grace: float = 5.0


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


class GuardStamp(TypedDict):
    """The keywords of `Topology.write_guarded`: the stamp of one logical write.

    - `version`, `token`: the write's stamp (compared with each key's stored one);
    - `expire_at_ms`: when the keys expire, unix milliseconds (None or 0: never);
    - `limit`: the newest clock version the writer accepts as real (0: no check);
    - `keep_ms`: how long a replaced value is kept for group reads (0: not kept;
      default 5000);
    - `replicas`, `wait_ms`, `aof`: wait on the write's own connection until that
      many replicas have it (`WAIT`), at most `wait_ms`, and with `aof` until it is
      fsynced (`WAITAOF`); the outcome's `acks` says what each shard acknowledged.
    """

    version: int
    token: str
    expire_at_ms: NotRequired[int | None]
    limit: NotRequired[int]
    keep_ms: NotRequired[int]
    replicas: NotRequired[int]
    wait_ms: NotRequired[int]
    aof: NotRequired[bool]


@runtime_checkable
class Topology(Protocol):
    """Where keys live and how a plan reaches them: one round trip per shard.

    Writer, reader and repair talk to Redis only through these members. Errors
    come out as `ShardError`s naming the shard; replies are raw RESP2 (bytes,
    integers, nested lists) on every topology.
    """

    @property
    def shard_names(self) -> list[str]:
        """One name per shard (host:port), as errors and reports name them."""
        ...

    @property
    def slot_bound(self) -> bool:
        """True when one server call (a script, a MULTI/EXEC) may only touch keys of
        one hash slot (a cluster); False when it may span a whole shard."""
        ...

    @property
    def slot_map(self) -> SlotMap:
        """Which shard (by its index in `shard_names`) serves each slot."""
        ...

    def slot_of(self, key: bytes) -> int:
        """The hash slot of `key` under this topology's hashing rule."""
        ...

    def shard_of(self, key: bytes) -> str:
        """The name of the shard that holds `key`."""
        ...

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        """The keys of `keys`, found on `shard`, that this topology routes elsewhere."""
        ...

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """GET every key: one round trip per shard, all shards at once."""
        ...

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        """Write each key through the guard; a shard that fails does not stop the others.

        The keywords are a `GuardStamp`: the write's `version` and `token`, and
        optionally `expire_at_ms`, `limit` and `keep_ms`.
        """
        ...

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        """Run one command on the shard that holds `key`; its raw reply. After a lost
        reply it is sent again only when idempotent (`resend` overrides)."""
        ...

    async def execute_on(self, shard: str, *args: Any) -> Any:
        """Run one command on the named shard (SCAN, INFO and the like); raw reply."""
        ...

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        """Run a Lua script on the node of `keys` (one unit): EVALSHA, EVAL on NOSCRIPT."""
        ...

    async def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
    ) -> list[Any]:
        """Several calls of `script`, each one unit (its keys on one node), all at once:
        per call its reply, or the `ShardError` it met (not raised). A cluster sends
        the calls bound for one node as one pipeline."""
        ...

    async def durable_script(
        self, script: Script, keys: Sequence[bytes], args: Sequence[Any], then: list[Command]
    ) -> tuple[Any, int]:
        """`script` as `script` does, then the waits `then` (`WAIT`, `WAITAOF`) on the
        same connection: the script's reply and how many replicas acknowledged it (0
        when the call had to go again elsewhere)."""
        ...

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        """Run `commands` in one MULTI/EXEC on the node of `keys`, exactly once."""
        ...

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        """One WATCH / read / MULTI / EXEC attempt on the node of `keys`.

        `body(read)` may read on the watched connection and returns the commands
        for MULTI/EXEC (None: none). (False, []) when a watched key changed.
        """
        ...

    async def open(self) -> None:
        """Check the servers before anything is written (`SetupError` if unfit)."""
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...
