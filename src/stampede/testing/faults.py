"""Fault injection for tests: topologies that wrap a real one and break writes on purpose.

- `DelegatingTopology` implements every member of the `Topology` protocol by
  passing it to `inner`; subclass it and override what the fault changes.
- `TearingTopology` tears the writes you arm: such a write reaches the keys of
  some of its shards only, as a writer that died between shards leaves it. The
  group then reads as in flight (the newest write every key kept still reads
  whole) or, once kept versions are gone (`drop_kept`), torn, which is how to
  test a repair strategy against a real torn group on real servers:

```python
topology = TearingTopology(st.topology)
torn = stampede.Stampede(topology)
topology.tear_next(reach=1)                  # the next write lands on one shard only
await torn.write("user:{7}", {...})          # raises InjectedCrash after that shard
await drop_kept(st.topology, keys)           # as if the grace window had passed
await st.read("user:{7}", keys, repair=NewestWins())
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, Unpack, cast, overload

from ..topology._base import WriteOutcome, each_script

if TYPE_CHECKING:
    from .._lua import Script
    from ..keys import SlotMap
    from ..topology._node_ops import Body, Command
    from ..typing import GuardStamp, Topology

__all__ = ["DelegatingTopology", "InjectedCrash", "TearingTopology"]

V = TypeVar("V")


class InjectedCrash(Exception):
    """Raised where a fault stopped a write on purpose (a writer "died" there)."""


class _FromInner(Generic[V]):
    """A read-only attribute read from `inner` each time (a cluster's map changes)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Self: ...

    @overload
    def __get__(self, obj: DelegatingTopology, owner: type) -> V: ...

    def __get__(self, obj: DelegatingTopology | None, owner: type) -> Self | V:
        return self if obj is None else cast(V, getattr(obj.inner, self._name))


class DelegatingTopology:
    """A `Topology` that passes every call to `inner` (subclass it to add a fault)."""

    def __init__(self, inner: Topology) -> None:
        self.inner = inner

    shard_names: _FromInner[list[str]] = _FromInner()
    slot_bound: _FromInner[bool] = _FromInner()
    slot_map: _FromInner[SlotMap] = _FromInner()

    def slot_of(self, key: bytes) -> int:
        return self.inner.slot_of(key)

    def shard_of(self, key: bytes) -> str:
        return self.inner.shard_of(key)

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        return self.inner.misrouted(shard, keys)

    async def open(self) -> None:
        await self.inner.open()

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return await self.inner.fetch(keys)

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        return await self.inner.write_guarded(keys, values, **stamp)

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        return await self.inner.execute(key, *args, resend=resend)

    async def execute_on(self, shard: str, *args: Any) -> Any:
        return await self.inner.execute_on(shard, *args)

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        return await self.inner.script(script, keys, args)

    async def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
    ) -> list[Any]:
        # one `script` call each, so that a subclass that hooks `script` sees them all
        return await each_script(self, script, calls)

    async def durable_script(
        self, script: Script, keys: Sequence[bytes], args: Sequence[Any], then: list[Command]
    ) -> tuple[Any, int]:
        return await self.inner.durable_script(script, keys, args, then)

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        return await self.inner.transaction(keys, commands)

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        return await self.inner.optimistic(keys, body)

    async def aclose(self) -> None:
        await self.inner.aclose()


class TearingTopology(DelegatingTopology):
    """Tears the guarded writes armed with `tear_next` (see the module)."""

    def __init__(self, inner: Topology) -> None:
        super().__init__(inner)
        self._armed: list[int] = []
        self.torn = 0
        """How many writes this topology tore."""

    def tear_next(self, *, reach: int = 1, count: int = 1) -> None:
        """Tear the next `count` writes that span more than `reach` shards: each lands
        on its first `reach` shards (in key order) and then raises `InjectedCrash`."""
        if reach < 0 or count < 1:
            raise ValueError("reach must be >= 0 and count >= 1")
        self._armed.extend([reach] * count)

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        shards = list(dict.fromkeys(self.inner.shard_of(k) for k in keys))
        if not self._armed or len(shards) <= self._armed[0]:
            return await super().write_guarded(keys, values, **stamp)
        reach = self._armed.pop(0)
        kept = set(shards[:reach])
        chosen = [i for i, key in enumerate(keys) if self.inner.shard_of(key) in kept]
        if chosen:
            await super().write_guarded(
                [keys[i] for i in chosen], [values[i] for i in chosen], **stamp
            )
        self.torn += 1
        raise InjectedCrash(f"the writer died after {reach} of {len(shards)} shards")
