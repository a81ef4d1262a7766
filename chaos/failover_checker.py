"""The failover checker: what the docs promise across a failover, judged from the events.

docs/operations.md ("Failover") promises, and this checks:

| kind                  | what is wrong                                                     |
| --------------------- | ----------------------------------------------------------------- |
| (every `check` rule)  | group reads: `mixed-read` (a read reported whole mixing writes),  |
|                       | `uncompleted-read`, `stale-read`, `lost-write`, ... (`checker`)   |
| `lost-durable-write`  | a write whose receipt said `durable` (`Durability(replicas=1)`)   |
|                       | is older than what its group reads at the end                     |
| `lost-durable-txn`    | a transaction whose receipt said `durable` is older, at a key it  |
|                       | wrote and did not leave pending, than the key's final             |
|                       | `read_atomic` (missing, or a transaction with a lower version)    |
| `fractured-read`      | `read_atomic` returned part of a transaction, except a key the    |
|                       | failover lost reading as missing (the documented answer)          |
| `phantom-value`,      | as in `ramp_checker`                                              |
| `wrong-key`, ...      |                                                                   |
| (`stamp-mismatch`)    | not when a repair of the group that was cancelled (its outcome    |
|                       | unknown) may have rolled the write forward under its own token    |
| `foreign-error`       | a write, read or transaction raised something that is not a       |
|                       | `StampedeError` ("everything stampede raises derives from it")    |

A `loss` fault (kill, stop, Sentinel kill; not `CLUSTER FAILOVER`, which waits for the
replica to catch up) may take what began before it and touched a key of the failed
shard: such group writes are listed as lost to the fault (the `kill` rule of `check`),
unless their receipt said durable; a transaction's key that lost it reads as missing
(never as an older value). Everything else must hold as without a fault: after a
graceful failover, every acknowledged write survives.

`failover_figures` measures each fault: seconds to the promotion, to the first
acknowledged group write invoked after the fault that touched the failed shard, and
to the last error; and the errors, by operation and type.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stampede.errors import StampedeError

from .checker import check
from .history import Event
from .index import as_stamp
from .ramp_checker import _origins, check_lines, ramp_ops
from .report import CheckReport, Violation

__all__ = [
    "FAULTS",
    "FailoverFigures",
    "FailoverReport",
    "check_failover",
    "failover_figures",
]

FAULTS = (
    "failover-graceful",
    "failover-kill",
    "failover-stop",
    "failover-lossy",
    "sentinel-kill",
    "sentinel-lossy",
)
ERRORS = ("fail", "unknown")


@dataclass
class FailoverFigures:
    """One fault's figures (seconds after the fault; None: did not happen)."""

    fault: str = ""
    promoted: float | None = None
    first_write: float | None = None
    last_error: float | None = None
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class FailoverReport(CheckReport):
    figures: list[FailoverFigures] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Loss:
    t: float
    keys: frozenset[str]


def _losses(events: Sequence[Mapping[str, Any]]) -> list[_Loss]:
    return [
        _Loss(float(e["t"]), frozenset(str(k) for k in e.get("keys", ())))
        for e in events
        if e.get("type") == "fault" and e.get("kind") == "loss"
    ]


def _ops(
    events: Sequence[Mapping[str, Any]],
) -> dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """op id -> (invoke, completion or None)."""
    out: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}
    for e in events:
        op = str(e["op"])
        if e.get("type") == "invoke":
            out[op] = (e, None)
        elif e.get("type") in ("ok", *ERRORS) and op in out:
            out[op] = (out[op][0], e)
    return out


def _durable_writes(events: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Every write acknowledged as durable is at most as new as its group's final read."""
    durable = {str(e["write"]) for e in events if e.get("type") == "durable" and e.get("durable")}
    ops = _ops(events)
    finals: dict[str, tuple[str, Mapping[str, Any]]] = {}
    acked: list[tuple[str, str, Mapping[str, Any]]] = []
    for op, (invoke, done) in ops.items():
        if done is None or done["type"] != "ok":
            continue
        if invoke.get("f") == "read" and invoke.get("final"):
            finals[str(invoke["group"])] = (op, done)
        elif invoke.get("f") == "write":
            values = invoke.get("values") or {}
            first = str(next(iter(values.values()), ""))
            wid = ":".join(first.split(":", 2)[:2])
            if wid in durable:
                acked.append((wid, op, done))
    out: list[Violation] = []
    for wid, op, done in acked:
        group = str(ops[op][0]["group"])
        stamp = as_stamp([done.get("version"), done.get("token")])
        final = finals.get(group)
        got = None if final is None else as_stamp([final[1].get("version"), final[1].get("token")])
        if stamp is not None and (got is None or got < stamp):
            out.append(
                Violation(
                    "lost-durable-write",
                    f"write {wid} of {group} was acknowledged durable (stamp "
                    f"{stamp[0]}:{stamp[1]}) but the group reads "
                    f"{'nothing' if got is None else f'{got[0]}:{got[1]}'} at the end",
                    (op,) if final is None else (op, final[0]),
                )
            )
    return out


def _final_values(
    ops: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]],
) -> dict[str, tuple[str, int | None]]:
    """Transaction key -> (the final `read_atomic` op, the value it returned)."""
    final: dict[str, tuple[str, int | None]] = {}
    for op, (invoke, done) in ops.items():
        if invoke.get("f") == "rread" and invoke.get("final") and done and done["type"] == "ok":
            for key, value in (done.get("values") or {}).items():
                final[str(key)] = (op, None if value is None else int(value))
    return final


def _durable_txns(events: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Every transaction acknowledged as durable is at most as new, at each key it wrote
    and committed (not `pending`), as what the final `read_atomic` of that key returned."""
    ops = _ops(events)
    version_of: dict[int, int] = {}  # value -> the version of the transaction that wrote it
    durable: list[tuple[str, int, dict[str, int]]] = []
    final = _final_values(ops)
    for op, (invoke, done) in ops.items():
        if invoke.get("f") == "txn":
            writes = {str(k): v for k, v in (invoke.get("writes") or {}).items()}
            for value in writes.values():
                if value is not None:
                    version_of[int(value)] = int(invoke["version"])
            if done is not None and done["type"] == "ok" and done.get("durable"):
                left = {str(k) for k in done.get("pending") or ()}
                kept = {k: v for k, v in writes.items() if f"ramp:{k}" not in left}
                durable.append((op, int(invoke["version"]), kept))
    out: list[Violation] = []
    for op, version, writes in durable:
        for key in writes:
            if key not in final:
                continue
            read, value = final[key]
            got = None if value is None else version_of.get(value)
            if got is None or got < version:
                out.append(
                    Violation(
                        "lost-durable-txn",
                        f"transaction {op} (version {version}) was acknowledged durable, but "
                        f"key {key} reads {'nothing' if value is None else value} at the end",
                        (op, read),
                    )
                )
    return out


def _numbering(events: Sequence[Mapping[str, Any]]) -> tuple[dict[int, float], dict[int, float]]:
    """`ramp_ops`' transaction ids: when each write transaction began, each read ended."""
    invokes = {str(e["op"]): e for e in events if e.get("type") == "invoke"}
    done = {str(e["op"]): e for e in events if e.get("type") in ("ok", *ERRORS)}
    txns = [e for e in invokes.values() if e.get("f") == "txn"]
    txns.sort(key=lambda e: (int(e["version"]), int(e["session"])))
    began: dict[int, float] = {}
    n = 0
    for e in txns:
        if done.get(str(e["op"]), {}).get("type") == "fail":
            continue
        n += 1
        began[n] = float(e["t"])
    ended: dict[int, float] = {}
    for e in events:
        if e.get("type") == "ok" and e.get("f") == "rread":
            n += 1
            ended[n] = float(e["t"])
    return began, ended


def _fractures(
    events: Sequence[Mapping[str, Any]], losses: Sequence[_Loss]
) -> tuple[list[Violation], int]:
    """`read_atomic` fractures not explained by a loss, and how many were explained.

    The numbering is `ramp_ops`': transactions that did not abort, by version, then
    read transactions in the order they completed.
    """
    began, ended = _numbering(events)
    ops, _ = ramp_ops(events)
    written: dict[int, tuple[int, int]] = {}
    writes_of: dict[int, dict[int, int]] = collections.defaultdict(dict)
    reads: dict[int, dict[int, int]] = collections.defaultdict(dict)
    for op in ops:
        if op.kind == "r":
            reads[op.txn][op.key] = op.value
        else:
            written[op.value] = (op.txn, op.key)
            writes_of[op.txn][op.key] = op.value
    out: list[Violation] = []
    excused = 0
    for txn, seen in reads.items():
        origin = _origins(txn, seen, written, [])
        for key, writer in origin.items():
            if writer is None:
                continue
            for other in writes_of.get(writer, {}):
                theirs = origin.get(other, -1)
                if other == key or theirs == -1 or (theirs is not None and theirs >= writer):
                    continue
                name = f"ramp:{other}"
                if theirs is None and any(
                    began[writer] < loss.t < ended[txn] and name in loss.keys for loss in losses
                ):
                    excused += 1
                    continue
                got = "nothing" if theirs is None else f"{seen[other]} (txn {theirs})"
                out.append(
                    Violation(
                        "fractured-read",
                        f"txn {txn} read key {key}={seen[key]} of txn {writer}, which also wrote "
                        f"key {other}, but read key {other}={got}",
                        (str(txn), str(writer)),
                    )
                )
    rest = [v for v in check_lines(ops) if v.kind != "fractured-read"]
    return rest + out, excused


def _stampede_errors() -> set[str]:
    names: set[str] = set()
    todo: list[type[BaseException]] = [StampedeError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return names


def _foreign(events: Sequence[Mapping[str, Any]]) -> list[Violation]:
    """Errors of the public calls that are not `StampedeError`s (cancellation aside)."""
    known = _stampede_errors() | {"CancelledError"}
    out: list[Violation] = []
    for op, (invoke, done) in _ops(events).items():
        if done is None or done["type"] not in ERRORS or invoke.get("f") == "repair":
            continue
        if str(done.get("error")) not in known:
            out.append(
                Violation(
                    "foreign-error",
                    f"{invoke.get('f')} {op} raised {done.get('error')}, not a StampedeError "
                    f"({str(done.get('msg', ''))[:120]})",
                    (op,),
                )
            )
    return out


def failover_figures(events: Sequence[Mapping[str, Any]]) -> list[FailoverFigures]:
    """Each fault's promotion, first write and last error, and the errors after it."""
    faults = [e for e in events if e.get("type") == "fault" and e.get("kind") in FAULTS]
    promoted = [
        float(e["t"]) for e in events if e.get("type") == "fault" and e.get("kind") == "promoted"
    ]
    ops = _ops(events)
    out: list[FailoverFigures] = []
    for fault in faults:
        t = float(fault["t"])
        keys = set(fault.get("keys", ()))
        figures = FailoverFigures(str(fault["kind"]))
        figures.promoted = min((p - t for p in promoted if p >= t), default=None)
        for invoke, done in ops.values():
            if done is None or float(done["t"]) < t:
                continue
            t1 = float(done["t"]) - t
            if done["type"] in ERRORS:
                figures.errors[f"{invoke.get('f')} {done.get('error')}"] += 1
                figures.last_error = max(figures.last_error or 0.0, t1)
            elif invoke.get("f") == "write" and float(invoke["t"]) >= t:
                touched = {*invoke.get("keys", ()), f"{invoke.get('group')}:stampede:commit"}
                if touched & keys and (figures.first_write is None or t1 < figures.first_write):
                    figures.first_write = t1
        out.append(figures)
    return out


def _cancelled_repairs(
    events: Sequence[Mapping[str, Any]], violations: list[Violation]
) -> tuple[list[Violation], int]:
    """Drop the `stamp-mismatch`es a cancelled repair explains: it saw the write whose
    values the read returned and may have rolled it forward (same version, its own
    token) before its cancellation was recorded as a failure."""
    ops = _ops(events)
    cancelled: dict[str, list[tuple[float, set[str]]]] = collections.defaultdict(list)
    for invoke, done in ops.values():
        if invoke.get("f") == "repair" and (done is None or done.get("error") == "CancelledError"):
            seen = {str(v[1]) for v in (invoke.get("seen") or {}).values() if v}
            cancelled[str(invoke.get("group"))].append((float(invoke["t"]), seen))
    kept: list[Violation] = []
    excused = 0
    for violation in violations:
        read = ops.get(violation.ops[0]) if violation.ops else None
        if violation.kind != "stamp-mismatch" or read is None or read[1] is None:
            kept.append(violation)
            continue
        values = {str(v) for v in (read[1].get("values") or {}).values()}
        t1 = float(read[1]["t"])
        group = str(read[0].get("group"))
        if any(t < t1 and values & seen for t, seen in cancelled[group]):
            excused += 1
        else:
            kept.append(violation)
    return kept, excused


def check_failover(events: Iterable[Mapping[str, Any]]) -> FailoverReport:
    """Judge a failover run's history (see the module table)."""
    ordered: list[Event] = sorted((dict(e) for e in events), key=lambda e: float(e["t"]))
    losses = _losses(ordered)
    as_kills = [{**e, "kind": "kill"} if e.get("kind") == "loss" else e for e in ordered]
    groups = check(as_kills)
    kept, by_repairs = _cancelled_repairs(ordered, groups.violations)
    report = FailoverReport(kept, groups.lost_to_fault, groups.counts)
    report.violations += _durable_writes(ordered)
    report.violations += _durable_txns(ordered)
    fractures, excused = _fractures(ordered, losses)
    report.violations += fractures
    report.violations += _foreign(ordered)
    c = report.counts
    c["faults_kill"] = 0  # the loss events, counted as kills by `check`
    c["fractures_excused"] = excused
    c["stamps_of_cancelled_repairs"] = by_repairs
    for invoke, done in _ops(ordered).values():
        f = invoke.get("f")
        if f in ("txn", "rread"):
            c[f"{f}_{'pending' if done is None else done['type']}"] += 1
    for e in ordered:
        if e.get("type") == "durable":
            c["durable_yes" if e.get("durable") else "durable_short"] += 1
        elif e.get("type") == "ok" and e.get("f") == "txn" and "durable" in e:
            c["txn_durable_yes" if e["durable"] else "txn_durable_short"] += 1
    c["violations"] = len(report.violations)
    report.figures = failover_figures(ordered)
    return report
