"""A Redis Cluster's slot map, learnt with `CLUSTER SLOTS`.

`SlotTable.load` asks every node it knows (the primaries and replicas the last map
named, then the startup nodes) in turn and keeps the first complete answer: which
primary (`host:port`) serves each of the 16384 slots. A MOVED reply updates one
slot at once; the caller then reloads the whole map (once, however many callers
met MOVED meanwhile), as it does after a connection error, a timeout or a
transient state (CLUSTERDOWN, READONLY, LOADING, MASTERDOWN) and periodically.

`address_remap` maps each announced `(host, port)` to the one to connect to (a
proxy, a NAT), as the cluster announces addresses from its own point of view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..keys import SLOTS, SlotMap
from ._resp import RedisError

__all__ = ["AddressRemap", "SlotTable", "SlotsUnknown"]

AddressRemap = Callable[[tuple[str, int]], tuple[str, int]]
"""`(host, port)` as the cluster announces it -> `(host, port)` to connect to."""


class SlotsUnknown(RedisError):
    """No node gave a slot map (or a slot has no owner): the cluster is not usable yet."""


class SlotTable:
    """Which primary serves each slot (see the module)."""

    __slots__ = ("_owners", "_primaries", "_replicas", "remap", "startups")

    def __init__(self, startup: str | Sequence[str], remap: AddressRemap | None = None) -> None:
        self.startups = [startup] if isinstance(startup, str) else list(startup)
        self.remap = remap
        self._owners: list[str | None] = [None] * SLOTS
        self._primaries: list[str] = []
        self._replicas: list[str] = []

    @property
    def startup(self) -> str:
        """The first startup node."""
        return self.startups[0]

    def known(self, *, avoid: str | None = None) -> list[str]:
        """Every node to ask for the map: primaries, replicas, startup nodes; `avoid`
        (a node that just failed) last."""
        nodes = list(dict.fromkeys([*self._primaries, *self._replicas, *self.startups]))
        if avoid in nodes:
            nodes.remove(avoid)
            nodes.append(avoid)
        return nodes

    @property
    def loaded(self) -> bool:
        return bool(self._primaries)

    @property
    def primaries(self) -> list[str]:
        """Every primary that serves a slot, in the order the cluster listed them."""
        return list(self._primaries)

    def node_of(self, slot: int) -> str:
        """The primary serving `slot`; `SlotsUnknown` before a map is loaded."""
        owner = self._owners[slot]
        if owner is None:
            raise SlotsUnknown(
                "no node is known to serve slot "
                f"{slot}" + ("" if self._primaries else " (the slot map is not loaded: open())")
            )
        return owner

    def address(self, host: str, port: int) -> str:
        """`host:port` to connect to for an announced address (after `remap`)."""
        if self.remap is not None:
            host, port = self.remap((host, port))
        return f"{host}:{port}"

    def slot_map(self) -> SlotMap:
        """The map as a `SlotMap` over `primaries` (`SlotsUnknown` before it is loaded)."""
        index = {name: i for i, name in enumerate(self._primaries)}
        ranges: dict[int, list[tuple[int, int]]] = {i: [] for i in index.values()}
        for slot, owner in enumerate(self._owners):
            if owner is None:
                raise SlotsUnknown(f"no node is known to serve slot {slot}")
            runs = ranges[index[owner]]
            if runs and runs[-1][1] == slot - 1:
                runs[-1] = (runs[-1][0], slot)
            else:
                runs.append((slot, slot))
        return SlotMap.from_ranges(ranges)

    def moved(self, slot: int, host: str, port: int) -> str:
        """A MOVED reply: `slot` is served by the announced address; its node name."""
        name = self.address(host, port)
        self._owners[slot] = name
        if name not in self._primaries:
            self._primaries.append(name)
        return name

    async def load(self, ask: Callable[[str], Awaitable[Any]], *, avoid: str | None = None) -> None:
        """Learn the map from the first node that answers `CLUSTER SLOTS` (`ask(node)`
        sends it to one node): any node known (primaries, replicas, startup nodes;
        `avoid` last); `SlotsUnknown` with every node's error when none does."""
        errors: list[str] = []
        for node in self.known(avoid=avoid):
            try:
                reply = await ask(node)
            except (RedisError, OSError, TimeoutError) as exc:
                errors.append(f"{node}: {exc}")
                continue
            owners, primaries, replicas = self._parse(reply, node)
            if primaries:
                self._owners, self._primaries, self._replicas = owners, primaries, replicas
                return
            errors.append(f"{node}: no slots assigned")
        raise SlotsUnknown("; ".join(errors) or "no node to ask")

    def _parse(self, reply: Any, asked: str) -> tuple[list[str | None], list[str], list[str]]:
        owners: list[str | None] = [None] * SLOTS
        primaries: list[str] = []
        replicas: list[str] = []
        if not isinstance(reply, Sequence):
            return owners, primaries, replicas
        for entry in reply:
            if not isinstance(entry, Sequence) or len(entry) < 3:
                continue
            first, last = int(entry[0]), int(entry[1])
            name = self._node(entry[2], asked)
            if name not in primaries:
                primaries.append(name)
            for slot in range(first, last + 1):
                owners[slot] = name
            replicas.extend(
                self._node(r, asked) for r in entry[3:] if isinstance(r, Sequence) and len(r) >= 2
            )
        return owners, primaries, list(dict.fromkeys(replicas))

    def _node(self, entry: Any, asked: str) -> str:
        host = _text(entry[0]) or asked.rsplit(":", 1)[0]  # "" or "?": the node asked
        if host == "?":
            host = asked.rsplit(":", 1)[0]
        return self.address(host, int(entry[1]))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
