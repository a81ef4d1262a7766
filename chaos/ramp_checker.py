"""The read-atomic checker: fractured reads, judged from a plain text history alone.

The history is one operation per line, `r(key,value,session,txn)` for a value a
read transaction returned and `w(key,value,session,txn)` for a value a write
transaction wrote; keys and values are integers, every written value is unique
(value 0 in a read: the key held nothing), `txn` is a transaction id unique over
the whole history. Among transactions that write, a higher `txn` id is a newer
version: the exporter numbers them in the order of the stamps their writers
chose *before sending anything* (so a writer that died mid-transaction has its
place too), which is the order in which the store installs versions.

The rules, over nothing but those lines:

| kind              | what is wrong                                                   |
| ----------------- | --------------------------------------------------------------- |
| `fractured-read`  | a read returned T's value for key x, and for another key y that |
|                   | T also wrote a value older than T's (an older transaction's, or |
|                   | nothing): the read saw part of T (RAMP's fractured reads)       |
| `phantom-value`   | a read returned a value no transaction of the history wrote     |
| `wrong-key`       | a read returned, at key x, the value its transaction wrote at y |
| `bad-history`     | a line that does not parse, or a value written twice            |

`check_lines` uses nothing of stampede but the `Violation` record: it can be copied
out and run alone.
`ramp_ops` (the JSON-lines front end) turns a chaos run's recorded events into
those lines and `check_ramp` adds, from the same events, `aborted-read`: a read
returned a value of a transaction whose writer was told it aborted before any
commit.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .report import CheckReport, Violation

__all__ = [
    "RampOp",
    "check_lines",
    "check_ramp",
    "export_lines",
    "format_op",
    "parse_line",
    "ramp_ops",
]

_LINE = re.compile(r"^\s*([rw])\((-?\d+),(-?\d+),(-?\d+),(-?\d+)\)\s*$")


@dataclass(frozen=True, slots=True)
class RampOp:
    """One line of the text history."""

    kind: str  # "r" | "w"
    key: int
    value: int
    session: int
    txn: int


def format_op(op: RampOp) -> str:
    return f"{op.kind}({op.key},{op.value},{op.session},{op.txn})"


def parse_line(line: str) -> RampOp | None:
    """The operation of one line; None for a blank line (ValueError for anything else)."""
    if not line.strip():
        return None
    match = _LINE.match(line)
    if match is None:
        raise ValueError(f"not an operation: {line.strip()[:80]!r}")
    kind, *numbers = match.groups()
    key, value, session, txn = (int(n) for n in numbers)
    return RampOp(kind, key, value, session, txn)


def _parse(lines: Iterable[str | RampOp], out: list[Violation]) -> list[RampOp]:
    ops: list[RampOp] = []
    for n, line in enumerate(lines, 1):
        if isinstance(line, RampOp):
            ops.append(line)
            continue
        try:
            op = parse_line(line)
        except ValueError as exc:
            out.append(Violation("bad-history", f"line {n}: {exc}"))
            continue
        if op is not None:
            ops.append(op)
    return ops


def _origins(
    txn: int, seen: Mapping[int, int], written: Mapping[int, tuple[int, int]], out: list[Violation]
) -> dict[int, int | None]:
    """Which transaction wrote each value a read returned (None: nothing, or unknown)."""
    origin: dict[int, int | None] = {}
    for key, value in seen.items():
        source = written.get(value) if value != 0 else None
        origin[key] = None if source is None else source[0]
        if value != 0 and source is None:
            message = f"txn {txn} read {value} at key {key}, a value no transaction wrote"
            out.append(Violation("phantom-value", message, (str(txn),)))
        elif source is not None and source[1] != key:
            message = f"txn {txn} read {value} at key {key}; txn {source[0]} wrote it at key "
            out.append(Violation("wrong-key", message + str(source[1]), (str(txn),)))
    return origin


def _fractures(
    txn: int,
    seen: Mapping[int, int],
    origin: Mapping[int, int | None],
    writes_of: Mapping[int, Mapping[int, int]],
    out: list[Violation],
) -> None:
    """A value of T beside an older value (or nothing) at another key T wrote."""
    for key, writer in origin.items():
        if writer is None:
            continue
        for other, other_value in writes_of.get(writer, {}).items():
            if other == key or other not in origin:
                continue
            theirs = origin[other]
            if theirs is not None and theirs >= writer:
                continue
            got = "nothing" if theirs is None else f"{seen[other]} (txn {theirs})"
            message = (
                f"txn {txn} read key {key}={seen[key]} of txn {writer}, which also wrote key "
                f"{other}={other_value}, but read key {other}={got}"
            )
            out.append(Violation("fractured-read", message, (str(txn), str(writer))))


def check_lines(lines: Iterable[str | RampOp], *, limit: int = 1000) -> list[Violation]:
    """Every violation of the rules above (at most `limit` are described)."""
    out: list[Violation] = []
    ops = _parse(lines, out)
    written: dict[int, tuple[int, int]] = {}  # value -> (txn, key)
    writes_of: dict[int, dict[int, int]] = collections.defaultdict(dict)  # txn -> key -> value
    reads: dict[int, dict[int, int]] = collections.defaultdict(dict)  # txn -> key -> value
    for op in ops:
        if op.kind == "r":
            reads[op.txn][op.key] = op.value
        elif op.value in written or op.value == 0:
            out.append(Violation("bad-history", f"value {op.value} is written twice (or is 0)"))
        else:
            written[op.value] = (op.txn, op.key)
            writes_of[op.txn][op.key] = op.value
    for txn, seen in reads.items():
        origin = _origins(txn, seen, written, out)
        _fractures(txn, seen, origin, writes_of, out)
    if len(out) > limit:
        out = [*out[:limit], Violation("truncated", f"{len(out) - limit} more violations")]
    return out


# -- the front end: a chaos run's JSON events -> text lines ---------------------------------


def _int_map(raw: Mapping[str, Any] | None) -> dict[int, int | None]:
    return {int(k): (None if v is None else int(v)) for k, v in (raw or {}).items()}


def ramp_ops(events: Sequence[Mapping[str, Any]]) -> tuple[list[RampOp], set[int]]:
    """The text history of a run's events, and the values of aborted transactions.

    Write transactions (`f: "txn"` invokes, with their `version` and `writes`) get
    ids 1.. in version order; those that completed `fail` (aborted before any
    commit) are left out, their values returned apart. Read transactions (`f:
    "rread"` completed `ok`) follow, numbered in the order they completed.
    """
    done: dict[str, str] = {}
    for e in events:
        if e.get("type") in ("ok", "fail", "unknown"):
            done[str(e["op"])] = str(e["type"])
    invokes = {str(e["op"]): e for e in events if e.get("type") == "invoke"}
    txns = [e for e in invokes.values() if e.get("f") == "txn"]
    txns.sort(key=lambda e: (int(e["version"]), int(e["session"])))
    ops: list[RampOp] = []
    aborted: set[int] = set()
    n = 0
    for e in txns:
        writes = _int_map(e.get("writes"))
        if done.get(str(e["op"])) == "fail":
            aborted.update(v for v in writes.values() if v is not None)
            continue
        n += 1
        for key, value in sorted(writes.items()):
            ops.append(RampOp("w", key, value or 0, int(e["session"]), n))
    for e in events:
        if e.get("type") != "ok" or e.get("f") != "rread":
            continue
        invoke = invokes.get(str(e["op"]), {})
        n += 1
        for key, value in sorted(_int_map(e.get("values")).items()):
            ops.append(RampOp("r", key, value or 0, int(invoke.get("session", 0)), n))
    return ops, aborted


def export_lines(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text history of a run's events, one operation per line."""
    return [format_op(op) for op in ramp_ops(events)[0]]


def check_ramp(events: Sequence[Mapping[str, Any]]) -> CheckReport:
    """`check_lines` over the run's text history, plus `aborted-read`, with the counts the
    chaos tables show (transactions as writes, read transactions as reads)."""
    report = CheckReport()
    ops, aborted = ramp_ops(events)
    for violation in check_lines(ops):
        value = _value_of(violation)
        if violation.kind == "phantom-value" and value in aborted:
            violation = Violation(
                "aborted-read", violation.message + " (it aborted)", violation.ops
            )
        report.violations.append(violation)
    c = report.counts
    kinds = {str(e["op"]): str(e.get("f")) for e in events if e.get("type") == "invoke"}
    for e in events:
        kind, f = e.get("type"), kinds.get(str(e.get("op")))
        if kind == "fault":
            c[f"faults_{e.get('kind')}"] += 1
        elif f == "txn" and kind in ("ok", "fail", "unknown"):
            c[f"writes_{kind}"] += 1
        elif f == "rread" and kind in ("ok", "fail"):
            c[f"reads_{kind}"] += 1
            if kind == "ok":
                c[f"reads_rounds_{e.get('rounds')}"] += 1
    finished = {str(e["op"]) for e in events if e.get("type") in ("ok", "fail", "unknown")}
    c["writes_unknown"] += sum(1 for op, f in kinds.items() if f == "txn" and op not in finished)
    c["fractured_reads"] = sum(1 for v in report.violations if v.kind == "fractured-read")
    return report


def _value_of(violation: Violation) -> int | None:
    match = re.search(r"read (-?\d+) at key", violation.message)
    return None if match is None else int(match.group(1))
