"""The events of a run, indexed for the checker's rules: operations, writes, losses.

Pure, like the checker: built from the JSON-lines events alone.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .history import Event, WriteId, parse_payload

__all__ = [
    "COMPLETING",
    "EXPIRY_SLACK",
    "Index",
    "Loss",
    "Op",
    "Stamp",
    "Write",
    "as_stamp",
    "read_stamp",
]

Stamp = tuple[int, str]
EXPIRY_SLACK = 0.05
"""Seconds past `acknowledged + ttl` after which a key is surely expired."""
COMPLETING = ("rewritten", "rolled_forward")
"""Repair actions that write the group (as opposed to lost races, queueing, ...)."""


@dataclass
class Op:
    id: str
    invoke: Event
    done: Event | None = None
    t0: float = 0.0
    t1: float = math.inf  # the completion's time; inf while pending

    def __post_init__(self) -> None:
        self.t0 = float(self.invoke["t"])

    def complete(self, done: Event) -> None:
        self.done = done
        self.t1 = float(done["t"])

    @property
    def f(self) -> str:
        return str(self.invoke.get("f", ""))

    @property
    def status(self) -> str:
        return "pending" if self.done is None else str(self.done["type"])

    @property
    def group(self) -> str:
        return str(self.invoke.get("group", ""))


@dataclass
class Write:
    wid: WriteId
    op: Op
    keys: tuple[str, ...]
    mode: str
    stamp: Stamp | None
    sent: frozenset[str] | None  # None: everything may have been sent
    held: frozenset[str] = frozenset()  # keys a `delay` fault held back
    late: list[tuple[float, frozenset[str]]] = field(default_factory=list)  # late sends

    @property
    def ok(self) -> bool:
        return self.op.status == "ok"

    @property
    def ttl(self) -> float | None:
        ttl = self.op.invoke.get("ttl")
        return None if ttl is None else float(ttl)

    @property
    def order(self) -> Stamp | None:
        """Its stamp; for a write that never reached Redis, the application's version
        (a database write a repair may load), ordered before any stamp of that version."""
        if self.stamp is not None:
            return self.stamp
        version = (self.op.done or {}).get("app_version")
        return None if version is None else (int(version), "")

    def sent_by(self, t: float) -> frozenset[str] | None:
        """The keys handed to the servers before `t`; None when that is not known.

        Known for a write that failed (what it sent, plus late sends begun before `t`)
        and for one whose part a `delay` fault held (everything but the held keys
        until their late send); for another acknowledged write it is not recorded.
        """
        late = frozenset(k for at, keys in self.late if at < t for k in keys)
        if self.sent is not None:
            return self.sent | late
        if self.held:
            return frozenset(self.touched()) - self.held | late
        return None

    def expired_by(self) -> float | None:
        """When its keys are surely gone by expiry (`ttl` after the acknowledgement)."""
        return None if self.ttl is None or not self.ok else self.op.t1 + self.ttl + EXPIRY_SLACK

    def touched(self) -> set[str]:
        """The keys this write wrote: data, the commit record, the version counter."""
        group = self.op.group
        out = set(self.keys)
        if self.mode == "commit":
            out.add(f"{group}:stampede:commit")
        if self.op.invoke.get("counter"):
            out.add(f"{group}:stampede:version")
        return out


@dataclass(frozen=True, slots=True)
class Loss:
    t: float
    shard: str
    keys: frozenset[str]


def _after(write: Write, other: Write) -> bool:
    assert write.stamp is not None and other.stamp is not None
    return write.stamp > other.stamp


def as_stamp(value: Any) -> Stamp | None:
    if isinstance(value, list | tuple) and len(value) == 2 and value[0] is not None:
        return (int(value[0]), str(value[1]))
    return None


def read_stamp(done: Event) -> Stamp | None:
    return as_stamp([done.get("version"), done.get("token")])


class Index:
    """The events of a run, indexed for the rules."""

    def __init__(self, events: Iterable[Mapping[str, Any]]) -> None:
        self.ops: dict[str, Op] = {}
        self.faults: list[Event] = []
        for raw in sorted((dict(e) for e in events), key=lambda e: float(e["t"])):
            if raw["type"] == "fault":
                self.faults.append(raw)
            elif raw["type"] == "invoke":
                self.ops[str(raw["op"])] = Op(str(raw["op"]), raw)
            elif str(raw["op"]) in self.ops:
                self.ops[str(raw["op"])].complete(raw)
        self.losses = [
            Loss(float(f["t"]), str(f.get("shard")), frozenset(f.get("keys", ())))
            for f in self.faults
            if f.get("kind") == "kill"
        ]
        self.writes: dict[WriteId, Write] = {}
        self.by_stamp: dict[Stamp, Write] = {}
        for op in self.ops.values():
            if op.f == "write":
                self._add_write(op)
        self._add_late()
        self.reads = [op for op in self.ops.values() if op.f == "read"]
        self.repairs = [op for op in self.ops.values() if op.f == "repair"]
        self._add_deletes_and_repairs()
        self.acked: dict[str, list[Write]] = collections.defaultdict(list)
        for w in self.writes.values():
            if w.ok and w.stamp is not None:
                self.acked[w.op.group].append(w)
        self.repairs_of: dict[str, list[Op]] = collections.defaultdict(list)
        for op in self.repairs:
            self.repairs_of[op.group].append(op)
        self.losses.sort(key=lambda loss: loss.t)
        self._loss_times = [loss.t for loss in self.losses]
        self._newest: dict[str, tuple[list[float], list[list[Write | None]]]] = {}
        for group, writes in self.acked.items():
            self._newest[group] = self._newest_index(writes)

    def _newest_index(self, writes: list[Write]) -> tuple[list[float], list[list[Write | None]]]:
        """Acknowledgement times, and per loss epoch the newest write acknowledged so far.

        Epoch e counts the data losses that happened before a read ended; the writes
        those losses may have taken are left out of epoch e's running maximum.
        """
        ordered = sorted(writes, key=lambda w: w.op.t1)
        per_epoch: list[list[Write | None]] = []
        for epoch in range(len(self.losses) + 1):
            losses = self.losses[:epoch]
            best: Write | None = None
            running: list[Write | None] = []
            for write in ordered:
                touched = write.touched()
                excused = any(
                    write.op.t0 < loss.t and not loss.keys.isdisjoint(touched) for loss in losses
                )
                if not excused and (best is None or _after(write, best)):
                    best = write
                running.append(best)
            per_epoch.append(running)
        return [w.op.t1 for w in ordered], per_epoch

    def newest_before(self, group: str, t: float, ended: float) -> Write | None:
        """The newest acknowledged write of `group` acknowledged before `t` that no data
        loss before `ended` may have taken."""
        index = self._newest.get(group)
        if index is None:
            return None
        times, per_epoch = index
        count = bisect.bisect_left(times, t)
        if count == 0:
            return None
        return per_epoch[bisect.bisect_left(self._loss_times, ended)][count - 1]

    def _add_write(self, op: Op) -> None:
        values: Mapping[str, Any] = op.invoke.get("values", {})
        parsed = [parse_payload(v) for v in values.values()]
        wid = parsed[0][0] if parsed and parsed[0] is not None else op.id
        done = op.done or {}
        stamp = as_stamp([done.get("version"), done.get("token")])
        sent: frozenset[str] | None = None
        if op.status in ("fail", "unknown"):
            sent = frozenset(done.get("sent", ()))
        write = Write(
            wid, op, tuple(op.invoke.get("keys", ())), str(op.invoke["mode"]), stamp, sent
        )
        self.writes[wid] = write
        if stamp is not None:
            self.by_stamp[stamp] = write

    def _add_deletes_and_repairs(self) -> None:
        self.deletes: dict[str, list[Op]] = collections.defaultdict(list)
        for op in self.ops.values():
            if op.f == "delete":
                self.deletes[op.group].append(op)
        self.poisoned = {str(f.get("group")) for f in self.faults if f.get("kind") == "poison"}
        self.repair_stamps: dict[Stamp, set[WriteId]] = collections.defaultdict(set)
        for op in self.repairs:
            done = op.done
            if done is not None and done["type"] == "ok" and done.get("action") in COMPLETING:
                stamp = as_stamp(done.get("stamp"))
                if stamp is not None:
                    self.repair_stamps[stamp] |= _wids(done.get("values") or {})
        # Repairs whose outcome is unknown (cancelled by their read's deadline, failed,
        # or never answered): each may have rolled the writes it saw forward under a
        # stamp of its own (the write's version, a new token) before it stopped.
        self.unsure_repairs: dict[str, list[tuple[float, set[WriteId]]]] = collections.defaultdict(
            list
        )
        for op in self.repairs:
            if op.done is None or op.done["type"] != "ok":
                seen = {k: v[1] for k, v in (op.invoke.get("seen") or {}).items() if v}
                self.unsure_repairs[op.group].append((op.t0, _wids(seen)))

    def _add_late(self) -> None:
        """Attach `hold` and `late-send` faults to the writes they belong to."""
        by_op = {w.op.id: w for w in self.writes.values()}
        for fault in self.faults:
            write = by_op.get(str(fault.get("write")))
            if write is None:
                continue
            keys = frozenset(str(k) for k in fault.get("keys", ()))
            if fault.get("kind") == "hold":
                write.held |= keys
            elif fault.get("kind") == "late-send":
                write.late.append((float(fault["t"]), keys))

    def tombstones(self, group: str) -> list[tuple[Op, Stamp]]:
        """Deletes of `group` that may have landed, and repairs that deleted it, with stamps."""
        out: list[tuple[Op, Stamp]] = []
        for op in self.deletes.get(group, ()):
            stamp = read_stamp(op.done or {})
            if stamp is not None and op.status != "fail":
                out.append((op, stamp))
        for op in self.repairs_of.get(group, ()):
            done = op.done or {}
            stamp = as_stamp(done.get("stamp"))
            if done.get("type") == "ok" and done.get("action") == "deleted" and stamp is not None:
                out.append((op, stamp))
        return out

    def at_risk(self, write: Write, before: float = math.inf) -> Loss | None:
        """The data-loss fault (before `before`) that may have taken `write`, if any."""
        touched = write.touched()
        for loss in self.losses:
            if write.op.t0 < loss.t < before and not loss.keys.isdisjoint(touched):
                return loss
        return None

    def completed_by(self, repair: Op) -> set[WriteId]:
        """The writes a repair may have made whole: the newest it saw, and what it wrote."""
        out: set[WriteId] = set()
        newest: tuple[Stamp, str] | None = None
        for item in (repair.invoke.get("seen") or {}).values():
            if not item or as_stamp(item[0]) is None:
                continue
            stamp = as_stamp(item[0])
            assert stamp is not None
            if newest is None or stamp > newest[0]:
                newest = (stamp, str(item[1]))
        if newest is not None and (parsed := parse_payload(newest[1])) is not None:
            out.add(parsed[0])
        done = repair.done
        if done is not None and done["type"] == "ok" and done.get("action") in COMPLETING:
            for value in (done.get("values") or {}).values():
                if (parsed := parse_payload(value)) is not None:
                    out.add(parsed[0])
        return out


def _wids(values: Mapping[str, Any]) -> set[WriteId]:
    return {p[0] for v in values.values() if (p := parse_payload(v)) is not None}
