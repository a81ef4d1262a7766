"""The checker of the read-atomic edge scenarios (`ramp_edges`): deletes, expiry, lost
commits, group repairs and eviction, judged from a run's JSON events alone.

Writes are transactions (`f: "txn"`, `ramp_workload.RampSession.transact`: `writes`
maps each key to its unique value, or null for `tx.delete`; `ttl` when the values
expire) and one-key group deletes (`f: "gdel"`, `st.delete(group, [key],
version=V)`). Every write carries the version its writer chose before sending, so
versions order them. Reads are `read_atomic` (`rread`; the last one of a run, over
every key, has `final: true`), group reads (`gread`) and the raw GETs of every key at
the end (`raw`). A write is *acknowledged at key k* when its writer got a receipt
and k is not among the receipt's `pending` keys; "before R began" compares the
completion's and the read's `invoke` timestamps (one monotonic clock).

| kind                 | what is wrong                                                   |
| -------------------- | --------------------------------------------------------------- |
| `fractured-read`     | R returned T's value at x and, at another key y that T wrote, a  |
|                      | value older than T, or nothing where nothing explains it (T     |
|                      | deleted y; a delete at y of T's or newer, or a TTL write at y   |
|                      | of T's or newer, invoked before R ended)                        |
| `deleted-comes-back` | R (or the raw GETs) returned U's value at k although a delete   |
|                      | of k newer than U was acknowledged at k before R began          |
| `expired-read`       | R returned U's value although U's TTL had run out before R began |
| `expired-comes-back` | ... although a newer TTL write at k, acknowledged at k, had     |
|                      | expired before R began                                          |
| `stale-read`         | ... although a newer value at k was acknowledged before R began |
|                      | (the key had moved past U)                                      |
| `lost-expiry`        | at the end a key holds a value or tombstone whose write had an  |
|                      | expiry, without one                                             |
| `lost-acknowledged`  | the final read returned, at a key an acknowledged transaction T |
|                      | wrote, something older than T (or nothing, unexplained)         |
| `no-final-read`      | the final read failed: visibility cannot be judged              |
| `group-mix`          | a consistent group read returned values of several writes       |
| `phantom-value`, `aborted-read`, `wrong-key`, `bad-history` | as in `ramp_checker` |

The "moved past" rules (`deleted-comes-back`, `expired-comes-back`, `stale-read`, and
`lost-acknowledged` for an older value) spare what the documented tombstone and TTL
semantics allow: a delayed older write U that re-creates a key once a newer delete's
tombstone (or a newer write's TTL) has run out, or, under eviction, may have been
evicted (as soon as it was written). They apply only when U's writer had finished
before that instant, so U's value came back by another hand (a reader or the sweep
completing U, or a delete or TTL write that never took effect); the spared cases
are counted (`late_recreated`). No rule spares a fractured read.

`EdgeRules` switches rules per scenario: under eviction (`EVICT_RULES`) a key may
go missing anywhere and only deletes count as "moved past". Repeated sightings of
one fact (the same value, the same newer write) are one violation, and each one
`ramp_edge_causes` can attribute to a known stampede defect ends with `(probable
cause Fn)`.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .ramp_edge_causes import annotate
from .ramp_edge_model import Index, Read, Write, parse
from .report import CheckReport, Violation

__all__ = [
    "DELETE_RULES",
    "EVICT_RULES",
    "LOST_COMMIT_RULES",
    "REPAIR_RULES",
    "EdgeRules",
    "check_edges",
]


@dataclass(frozen=True)
class EdgeRules:
    """Which rules apply to a scenario's history."""

    missing_ok: bool = False  # a key may be missing anywhere (evicted)
    moved_past_values: bool = True  # stale-read and expired-comes-back, not only deletes
    visibility: bool = True  # lost-acknowledged on the final read
    final_required: bool = True  # no-final-read when it failed (else only counted)
    end_expiry: bool = True  # lost-expiry on the raw GETs


DELETE_RULES = EdgeRules()
LOST_COMMIT_RULES = EdgeRules()
REPAIR_RULES = EdgeRules(final_required=False)  # a repair's restamp: MixedWritersError
EVICT_RULES = EdgeRules(
    missing_ok=True, moved_past_values=False, visibility=False, final_required=False
)


Sightings = dict[tuple[str, int, str, str], list[Any]]
"""(kind, key, the value's write, the write it broke a rule against) -> [the first
sighting's message, its operations, how many reads saw it]."""


def _origins(r: Read, index: Index, out: list[Violation]) -> dict[int, Write | None]:
    origin: dict[int, Write | None] = {}
    for key, value in r.values.items():
        found = None if value is None else index.by_value.get(value)
        origin[key] = None if found is None else found[0]
        if value is None:
            continue
        if found is None:
            out.append(Violation("phantom-value", f"{r.op} read {value} at key {key}, a value "
                                 "no write wrote", (r.op,)))  # fmt: skip
        elif found[1] != key:
            out.append(Violation("wrong-key", f"{r.op} read {value} at key {key}; {found[0].op} "
                                 f"wrote it at key {found[1]}", (r.op, found[0].op)))  # fmt: skip
        elif found[0].status == "fail":
            out.append(Violation("aborted-read", f"{r.op} read {value} at key {key} of "
                                 f"{found[0]}, which aborted", (r.op, found[0].op)))  # fmt: skip
    return origin


def _fractures(r: Read, origin: Mapping[int, Write | None], index: Index, rules: EdgeRules,
               c: collections.Counter[str], seen: Sightings) -> None:  # fmt: skip
    for x, t in origin.items():
        if t is None:
            continue
        for y in t.writes:
            if y == x or y not in r.values:
                continue
            other = origin[y]
            if r.values[y] is not None:
                if other is None or other.version >= t.version:
                    continue
                got, by = f"{r.values[y]} of {other}", other.op
            elif rules.missing_ok:
                c["missing_beside"] += 1
                continue
            elif index.explained_missing(y, t, r.done):
                continue
            else:
                got, by = "nothing (no delete or TTL write of T's or newer explains it)", ""
            message = (f"{r.op} read key {x}={r.values[x]} of {t}, which also wrote key "
                       f"{y}={t.writes[y]}, but read key {y}={got}")  # fmt: skip
            _saw(seen, ("fractured-read", y, t.op, by), message, r.op)


def _moved_past(r: Read, origin: Mapping[int, Write | None], index: Index, rules: EdgeRules,
                seen: Sightings) -> None:  # fmt: skip
    for key, u in origin.items():
        if u is None or r.values[key] is None:
            continue
        head = f"{r.op} (began t={r.invoked:.3f}) read key {key}={r.values[key]} of {u}"
        if u.expired_by(r.invoked):
            _saw(seen, ("expired-read", key, u.op, ""), f"{head}: its TTL had run out", r.op)
            continue
        newer = index.newer_acknowledged(key, u, r.invoked)
        deletes = [w for w in newer if w.writes[key] is None]
        values = [w for w in newer if w.writes[key] is not None] if rules.moved_past_values else []
        evicting = rules.missing_ok
        if not (deletes or values) or index.late_recreation(key, u, r.done, evicting=evicting):
            continue
        if deletes:
            w, kind = deletes[-1], "deleted-comes-back"
            why = f"{head}, although {w} had deleted key {key}"
        else:
            w = values[-1]
            kind = "expired-comes-back" if w.expired_by(r.invoked) else "stale-read"
            why = f"{head}, although {w} had written key {key}={w.writes[key]}"
        _saw(seen, (kind, key, u.op, w.op), why, r.op)


def _saw(seen: Sightings, fact: tuple[str, int, str, str], message: str, read: str) -> None:
    if fact in seen:
        seen[fact][2] += 1
    else:
        seen[fact] = [message, (read, *(op for op in fact[2:] if op)), 1]


def _visible(final: Read, origin: Mapping[int, Write | None], writes: Sequence[Write],
             index: Index, rules: EdgeRules, out: list[Violation]) -> None:  # fmt: skip
    for t in writes:
        if t.kind != "txn" or t.status != "ok":
            continue
        for key, value in t.writes.items():
            if key not in final.values:
                continue
            got, u = final.values[key], origin[key]
            if got is not None and (u is None or u.version >= t.version):
                continue
            if u is not None and index.late_recreation(key, u, final.done):
                continue
            if got is None and (rules.missing_ok or index.explained_missing(key, t, final.done)):
                continue
            shown = "nothing" if got is None else f"{got} of {u}"
            message = f"acknowledged {t} wrote key {key}={value}; the final read shows {shown}"
            ops = (final.op, t.op) if u is None else (final.op, t.op, u.op)
            out.append(Violation("lost-acknowledged", message, ops))


def _group_mix(r: Read, origin: Mapping[int, Write | None], out: list[Violation]) -> None:
    writers = {w.op for w in origin.values() if w is not None}
    missing = [k for k, v in r.values.items() if v is None]
    if not writers or (len(writers) == 1 and not missing):
        return
    shown = ", ".join(f"{k}={v}{_by(origin[k])}" for k, v in sorted(r.values.items()))
    out.append(Violation("group-mix", f"{r.op}: a consistent group read of {shown}", (r.op,)))


def _by(w: Write | None) -> str:
    return "" if w is None else f" ({w.op})"


def _raw_expiry(r: Read, origin: Mapping[int, Write | None], index: Index,
                out: list[Violation]) -> None:  # fmt: skip
    for key, at in r.expiry.items():
        u = origin.get(key)
        tomb = r.tombs.get(key)
        if at != -1:
            continue
        if u is not None and r.values[key] is not None and u.ttl is not None:
            out.append(Violation("lost-expiry", f"at the end key {key}={r.values[key]} of {u} "
                                 "has no expiry", (r.op, u.op)))  # fmt: skip
        elif tomb is not None:
            w = index.by_version.get(tomb)
            out.append(Violation("lost-expiry", f"at the end key {key} holds a tombstone "
                                 f"(version {tomb}{'' if w is None else ', ' + w.op}) with no "
                                 "expiry", (r.op,)))  # fmt: skip


def _judge(r: Read, writes: Sequence[Write], index: Index, rules: EdgeRules,
           c: collections.Counter[str], out: list[Violation], seen: Sightings) -> bool:  # fmt: skip
    """Every rule that applies to read `r`; whether it was a final read judged for
    visibility."""
    origin = _origins(r, index, out)
    if r.kind == "gread":
        if r.consistent:
            _group_mix(r, origin, out)
        return False
    if r.kind == "rread":
        _fractures(r, origin, index, rules, c, seen)
    _moved_past(r, origin, index, rules, seen)
    if r.kind == "raw" and rules.end_expiry:
        _raw_expiry(r, origin, index, out)
    if r.final and rules.visibility:
        _visible(r, origin, writes, index, rules, out)
        return True
    return False


def check_edges(events: Sequence[Mapping[str, Any]], rules: EdgeRules = DELETE_RULES,
                *, limit: int = 1000) -> CheckReport:  # fmt: skip
    """Every violation of the rules above (at most `limit` described), with the counts the
    chaos tables show."""
    report = CheckReport()
    c, out = report.counts, report.violations
    writes, reads, failed_final = parse(events, c)
    index = Index.build(writes, out)
    seen: Sightings = {}
    finals = sum(_judge(r, writes, index, rules, c, out, seen) for r in reads)
    for (kind, *_), (message, ops, n) in seen.items():
        more = f" (seen by {n} reads)" if n > 1 else ""
        out.append(Violation(kind, message + more, ops))
    c["late_recreated"] = index.late
    if rules.visibility and rules.final_required and not finals:
        detail = "; ".join(failed_final) or "no final read in the history"
        out.append(Violation("no-final-read", f"the final read_atomic failed: {detail}"))
    for e in events:
        if e.get("type") == "fault":
            c[f"faults_{e.get('kind')}"] += 1
            c["evicted_keys"] += int(e.get("allkeys", 0)) + int(e.get("volatile", 0))
    for cause in annotate(out, reads, writes, index, c["late_recreated"], rules.missing_ok):
        c[f"causes_{cause or 'unexplained'}"] += 1
    for v in out:
        c[f"violations_{v.kind}"] += 1
    c["fractured_reads"] = c["violations_fractured-read"]
    if len(out) > limit:
        out[limit:] = [Violation("truncated", f"{len(out) - limit} more violations")]
    return report
