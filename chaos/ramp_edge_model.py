"""The history of a read-atomic edge run as the checker sees it (`ramp_edge_checker`):
the writes (`Write`: transactions and one-key group deletes, with their versions,
TTLs, tombstone lifetimes and outcomes), the reads (`Read`: `read_atomic`, group
reads, the raw GETs at the end), parsed from the JSON events (`parse`), and the
`Index` the rules look things up in."""

from __future__ import annotations

import bisect
import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .report import Violation

__all__ = ["SLACK", "Index", "Read", "Write", "parse"]

SLACK = 0.005
"""Seconds added to an expiry instant (ms rounding; the server's clock is the same)."""


@dataclass
class Write:
    op: str
    kind: str  # "txn" | "gdel"
    version: int
    writes: dict[int, int | None]
    ttl: float | None
    invoked: float
    grace: float | None = None  # its tombstones' lifetime (deletes)
    done: float | None = None
    status: str | None = None  # ok | fail | unknown | None (no completion)
    pending: frozenset[int] = frozenset()
    sent: float | None = None  # when it called commit(): its expiry instants count from then

    @property
    def stamped(self) -> float:
        """When its expiry instants were computed (the invoke, without `sent`)."""
        return self.invoked if self.sent is None else self.sent

    def acknowledged_at(self, key: int) -> bool:
        return self.status == "ok" and key not in self.pending

    def expired_by(self, t: float) -> bool:
        """Its TTL had surely run out by `t` (counted from `sent`, else its completion)."""
        latest = self.sent if self.sent is not None else self.end
        return self.ttl is not None and latest + self.ttl + SLACK < t

    def gone_instant(self, key: int) -> float:
        """When what it wrote at `key` ran out (a tombstone, a TTL value); inf: never."""
        if self.writes[key] is None:
            return float("inf") if self.grace is None else self.stamped + self.grace
        return float("inf") if self.ttl is None else self.stamped + self.ttl

    @property
    def end(self) -> float:
        """When its writer finished (inf: it never did)."""
        return float("inf") if self.done is None else self.done

    def __str__(self) -> str:
        what = "txn" if self.kind == "txn" else "st.delete"
        ttl = "" if self.ttl is None else f", ttl {self.ttl:g} s"
        done = "no completion" if self.done is None else f"{self.status} at t={self.done:.3f}"
        return (
            f"{what} {self.op} (version {self.version}{ttl}, invoked t={self.invoked:.3f}, {done})"
        )


@dataclass
class Read:
    op: str
    kind: str  # "rread" | "gread" | "raw"
    invoked: float
    done: float
    values: dict[int, int | None]
    final: bool = False
    consistent: bool = True
    tombs: dict[int, int] = field(default_factory=dict)
    expiry: dict[int, int] = field(default_factory=dict)
    rounds: int = 1
    repaired: bool = False  # a group read whose repair wrote


def _key(name: Any) -> int:
    return int(str(name).rsplit(":", 1)[-1])


def _ints(raw: Mapping[str, Any] | None) -> dict[int, int | None]:
    return {_key(k): (None if v is None else int(v)) for k, v in (raw or {}).items()}


def parse(events: Sequence[Mapping[str, Any]], c: collections.Counter[str]) -> tuple[
    list[Write], list[Read], list[str]]:  # fmt: skip
    invokes = {str(e["op"]): e for e in events if e.get("type") == "invoke"}
    done = {str(e["op"]): e for e in events if e.get("type") in ("ok", "fail", "unknown")}
    writes: list[Write] = []
    reads: list[Read] = []
    failed_final: list[str] = []
    for op, e in invokes.items():
        f, end = e.get("f"), done.get(op)
        if f in ("txn", "gdel"):
            w = Write(
                op, str(f), int(e["version"]), _ints(e.get("writes")), e.get("ttl"), float(e["t"])
            )
            w.grace = e.get("grace")
            if end is not None:
                w.done, w.status = float(end["t"]), str(end["type"])
                w.pending = frozenset(_key(k) for k in end.get("pending") or ())
                w.sent = end.get("sent")
            writes.append(w)
            prefix = "writes" if f == "txn" else "deletes"
            c[f"{prefix}_{w.status or 'unknown'}"] += 1
            if f == "txn" and end is not None and end["type"] == "unknown":
                c[f"txn_errors_{end.get('error')}"] += 1
            c["txn_deletes"] += sum(1 for v in w.writes.values() if v is None) if f == "txn" else 0
            c["ttl_txns"] += w.ttl is not None
        elif f in ("rread", "gread", "raw") and end is not None:
            prefix = {"rread": "reads", "gread": "greads", "raw": "raws"}[str(f)]
            c[f"{prefix}_{end['type']}"] += 1
            if end["type"] != "ok":
                c[f"{'g' if f == 'gread' else ''}errors_{end.get('error')}"] += 1
                if e.get("final"):
                    failed_final.append(f"{op}: {end.get('error')} {end.get('msg', '')}")
                continue
            r = Read(op, str(f), float(e["t"]), float(end["t"]), _ints(end.get("values")))
            r.final = bool(e.get("final"))
            r.consistent = bool(end.get("consistent", True))
            r.tombs = {_key(k): int(v) for k, v in (end.get("tombs") or {}).items()}
            r.expiry = {_key(k): int(v) for k, v in (end.get("expiry") or {}).items()}
            r.rounds = int(end.get("rounds") or 1)
            r.repaired = bool(end.get("repaired"))
            c["reads_rounds_2"] += end.get("rounds") == 2
            c["greads_repaired"] += bool(end.get("repaired"))
            reads.append(r)
    return writes, reads, failed_final


@dataclass
class Index:
    """What the rules look up: who wrote each value, each key's writes and acknowledgements."""

    by_value: dict[int, tuple[Write, int]] = field(default_factory=dict)
    by_version: dict[int, Write] = field(default_factory=dict)
    gone_at: dict[int, tuple[list[int], list[Write]]] = field(default_factory=dict)
    acked: dict[int, tuple[list[float], list[Write]]] = field(default_factory=dict)
    late: int = 0  # moved-past cases spared as documented late older writes

    @classmethod
    def build(cls, writes: Sequence[Write], out: list[Violation]) -> Index:
        index = cls()
        gone: dict[int, list[Write]] = collections.defaultdict(list)
        acks: dict[int, list[Write]] = collections.defaultdict(list)
        for w in writes:
            index.by_version[w.version] = w
            for key, value in w.writes.items():
                if value is not None and value in index.by_value:
                    out.append(Violation("bad-history", f"value {value} is written twice"))
                elif value is not None:
                    index.by_value[value] = (w, key)
                if w.status != "fail" and (value is None or w.ttl is not None):
                    gone[key].append(w)  # deletes and TTL writes, by version
                if w.acknowledged_at(key):
                    acks[key].append(w)  # acknowledged there, by completion
        for key, ws in gone.items():
            ws.sort(key=lambda w: w.version)
            index.gone_at[key] = ([w.version for w in ws], ws)
        for key, ws in acks.items():
            ws.sort(key=lambda w: w.end)
            index.acked[key] = ([w.end for w in ws], ws)
        return index

    def gone_after(self, key: int, version: int) -> list[Write]:
        versions, gone = self.gone_at.get(key, ([], []))
        return gone[bisect.bisect_right(versions, version) :]

    def explained_missing(self, key: int, t: Write, before: float) -> bool:
        """Nothing at `key` beside T: T deleted it, or it (or something newer) expired."""
        if t.writes.get(key, 0) is None or t.ttl is not None:
            return True
        return any(w.invoked < before for w in self.gone_after(key, t.version))

    def late_recreation(self, key: int, u: Write, before: float, *, evicting: bool = False) -> bool:
        """U's writer was still at work when a newer delete's tombstone (or a newer TTL
        write) at `key`, begun before `before`, ran out: U may have re-created the key.
        Under eviction (`evicting`) a tombstone may be gone as soon as it is written."""

        def gone(w: Write) -> float:
            if evicting and w.writes[key] is None:
                return w.invoked
            return w.gone_instant(key)

        late = any(
            w.invoked < before and gone(w) < u.end + SLACK for w in self.gone_after(key, u.version)
        )
        self.late += late
        return late

    def newer_acknowledged(self, key: int, u: Write, since: float) -> list[Write]:
        """Writes newer than U acknowledged at `key` before `since`."""
        times, acked = self.acked.get(key, ([], []))
        return [w for w in acked[: bisect.bisect_left(times, since)] if w.version > u.version]
