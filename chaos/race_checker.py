"""The checker's rules for the race scenarios: deletes and expiry, deposits, clocks.

Pure, like `checker`: they read the indexed history only. `check` calls
`check_races` after its own rules; `stale_nothing` and `stale_value` extend its
stale-read rule with deletes and expiry.

| kind               | what is wrong                                                       |
| ------------------ | ------------------------------------------------------------------- |
| `resurrected`      | a read returned a write older than a delete (or a deleting repair)   |
|                    | that completed before the read began, or than a newer write that had |
|                    | expired by then: a deleted or expired group came back                |
| `stale-repair`     | (also) a repair wrote a stamp older than a delete completed before   |
|                    | the repair's read began                                             |
| `deposit-twice`    | a balance lists one deposit twice (applied twice)                   |
| `deposit-lost`     | an acknowledged deposit is missing from a balance read after it     |
| `deposit-phantom`  | a balance lists a deposit that failed before anything was sent, or  |
|                    | that no one made                                                    |
| `balance-mismatch` | a balance is not the sum of the deposits it lists                   |
| `wedged`           | a write or read of a watched group (one with a clock-skew window)   |
|                    | that nobody poisoned failed with an ordering error (`OrderingError`,|
|                    | `ClockSkewError`) or a clock out of range                           |
| `reordered`        | of two acknowledged writes of a sequential group, the one that      |
|                    | began after the other was acknowledged has the lower stamp, by more |
|                    | than the clock-skew window recorded for the group                  |
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Iterator
from typing import Any

from .index import Index, Op, Stamp, Write, as_stamp, read_stamp
from .report import Violation

__all__ = [
    "WEDGE_ERRORS",
    "check_races",
    "count_races",
    "expired_before",
    "may_have_expired",
    "parse_balance",
    "stale_nothing",
    "stale_value",
]

WEDGE_ERRORS = frozenset({"OrderingError", "ClockSkewError", "OverflowError", "ConfigurationError"})
"""Errors that mean a client could not order its write (or its clock left the range)."""


def expired_before(write: Write, t: float) -> bool:
    """True when `write`'s keys had surely expired by `t`."""
    gone = write.expired_by()
    return gone is not None and gone < t


def may_have_expired(write: Write, t: float) -> bool:
    """True when `write`'s keys may have expired by `t` (its ttl counted from its start)."""
    return write.ttl is not None and write.op.t0 + write.ttl < t


def stale_nothing(h: Index, read: Op, write: Write) -> Violation | None:
    """A read found nothing although `write` was acknowledged before it began.

    Fine when a delete (or a deleting repair) newer than `write` began before the
    read ended, or when `write` may have expired by then.
    """
    assert write.stamp is not None
    if may_have_expired(write, read.t1):
        return None
    for op, stamp in h.tombstones(read.group):
        if stamp > write.stamp and op.t0 < read.t1:
            return None
    return Violation(
        "stale-read",
        f"read {read.id} of {read.group} found nothing, though write {write.wid} was "
        "acknowledged before the read began and nothing newer deleted it",
        (read.id, write.op.id),
    )


def stale_value(h: Index, read: Op, stamp: Stamp) -> Violation | None:
    """A value read under `stamp` after a newer delete, or a newer write's expiry."""
    for op, tomb in h.tombstones(read.group):
        if op.t1 < read.t0 and tomb > stamp and op.status == "ok":
            what = "delete" if op.f == "delete" else "deleting repair"
            return Violation(
                "resurrected",
                f"read {read.id} of {read.group} returned stamp {stamp[0]}:{stamp[1]}, older "
                f"than {what} {op.id} (stamp {tomb[0]}:{tomb[1]}) completed before it began",
                (read.id, op.id),
            )
    for write in h.acked.get(read.group, ()):
        assert write.stamp is not None
        if write.stamp > stamp and expired_before(write, read.t0):
            return Violation(
                "resurrected",
                f"read {read.id} of {read.group} returned stamp {stamp[0]}:{stamp[1]}, older "
                f"than write {write.wid}, which had expired before the read began",
                (read.id, write.op.id),
            )
    return None


def _repairs_after_deletes(h: Index) -> Iterator[Violation]:
    """A repair never writes a stamp older than a delete completed before its read began."""
    for group, deletes in h.deletes.items():
        done_deletes = [(op, read_stamp(op.done or {})) for op in deletes if op.status == "ok"]
        for repair in h.repairs_of.get(group, ()):
            done = repair.done or {}
            if done.get("type") != "ok" or done.get("action") not in (
                "rewritten",
                "rolled_forward",
            ):
                continue
            stamp = as_stamp(done.get("stamp"))
            began = float(repair.invoke.get("began", repair.t0))
            for op, tomb in done_deletes:
                if tomb is not None and op.t1 < began and (stamp is None or stamp < tomb):
                    yield Violation(
                        "stale-repair",
                        f"repair {repair.id} of {group} wrote data older than delete {op.id}, "
                        "completed before the repair's read began",
                        (repair.id, op.id),
                    )
                    break


# -- deposits: update() applied exactly once ---------------------------------------------


def parse_balance(payload: str | None) -> tuple[int, list[str]] | None:
    """`"<balance>|<id>,<id>,..."` -> (balance, deposit ids); None when malformed."""
    if payload is None:
        return (0, [])
    head, sep, tail = payload.partition("|")
    if not sep or not head.lstrip("-").isdigit():
        return None
    return int(head), [i for i in tail.split(",") if i]


def _deposits(h: Index) -> Iterator[Violation]:
    deposits: dict[str, dict[str, Op]] = collections.defaultdict(dict)
    for op in h.ops.values():
        if op.f == "deposit":
            deposits[op.group][str(op.invoke["id"])] = op
    for op in h.ops.values():
        if op.f != "balance" or op.status != "ok":
            continue
        assert op.done is not None
        yield from _judge_balance(op, deposits[op.group])


def _judge_balance(read: Op, made: dict[str, Op]) -> Iterator[Violation]:
    assert read.done is not None
    parsed = parse_balance(read.done.get("payload"))
    if parsed is None:
        yield Violation("balance-mismatch", f"balance read {read.id} is malformed", (read.id,))
        return
    balance, ids = parsed
    twice = sorted(i for i, n in collections.Counter(ids).items() if n > 1)
    if twice:
        yield Violation(
            "deposit-twice",
            f"balance read {read.id} of {read.group} lists deposit(s) {', '.join(twice)} twice",
            (read.id, *(made[i].id for i in twice if i in made)),
        )
    listed = set(ids)
    for i in sorted(listed):
        op = made.get(i)
        if op is None or op.status == "fail":
            yield Violation(
                "deposit-phantom",
                f"balance read {read.id} of {read.group} lists deposit {i}, which "
                + ("no one made" if op is None else "failed before anything was sent"),
                (read.id,),
            )
    for i, op in made.items():
        if op.status == "ok" and op.t1 < read.t0 and i not in listed:
            yield Violation(
                "deposit-lost",
                f"deposit {i} ({op.id}) was acknowledged before balance read {read.id} of "
                f"{read.group} began, which does not list it",
                (read.id, op.id),
            )
    total = sum(int(made[i].invoke.get("amount", 0)) for i in ids if i in made)
    if total != balance:
        yield Violation(
            "balance-mismatch",
            f"balance read {read.id} of {read.group} says {balance}, but the deposits it "
            f"lists add up to {total}",
            (read.id,),
        )


# -- clocks: nobody wedged, sequential writes in order ----------------------------------


def _windows(h: Index) -> dict[str, int]:
    """The clock-skew window (version units) of each group the clock scenario watches."""
    return {str(f["group"]): int(f["window"]) for f in h.faults if f.get("kind") == "clock-window"}


def _wedged(h: Index) -> Iterator[Violation]:
    """Watched groups (those with a clock window) that nobody poisoned never refuse."""
    watched = set(_windows(h)) - h.poisoned
    for op in h.ops.values():
        if op.f not in ("write", "read", "delete") or op.group not in watched:
            continue
        error = (op.done or {}).get("error")
        if op.status in ("fail", "unknown") and error in WEDGE_ERRORS:
            yield Violation(
                "wedged",
                f"{op.f} {op.id} of {op.group}, a group nobody poisoned, failed with {error}",
                (op.id,),
            )


def _reordered(h: Index) -> Iterator[Violation]:
    for group, window in sorted(_windows(h).items()):
        writes = sorted(h.acked.get(group, ()), key=lambda w: w.op.t1)
        ends = [w.op.t1 for w in writes]
        best: list[Write] = []
        for write in writes:
            assert write.stamp is not None
            if not best or write.stamp > _stamp(best[-1]):
                best.append(write)
            else:
                best.append(best[-1])
        for later in writes:
            count = bisect.bisect_left(ends, later.op.t0)
            if count == 0:
                continue
            earlier = best[count - 1]
            assert later.stamp is not None and earlier.stamp is not None
            if earlier.stamp > later.stamp and earlier.stamp[0] - later.stamp[0] >= window:
                yield Violation(
                    "reordered",
                    f"write {later.wid} of {group} began after write {earlier.wid} was "
                    f"acknowledged but has the lower stamp ({later.stamp[0]} < "
                    f"{earlier.stamp[0]}, beyond the clock-skew window {window})",
                    (earlier.op.id, later.op.id),
                )


def _stamp(write: Write) -> Stamp:
    assert write.stamp is not None
    return write.stamp


def check_races(h: Index) -> list[Violation]:
    """Every rule of this module over the indexed history."""
    return [*_repairs_after_deletes(h), *_deposits(h), *_wedged(h), *_reordered(h)]


def count_races(h: Index, counts: collections.Counter[str]) -> None:
    """Figures for the tables: deletes, deposits, late sends, refused clock versions."""
    for op in h.ops.values():
        if op.f in ("delete", "deposit"):
            counts[f"{op.f}s_{op.status}"] += 1
    for write in h.writes.values():
        error: Any = (write.op.done or {}).get("error")
        if error in WEDGE_ERRORS:
            counts["writes_refused_ordering"] += 1
        if write.ttl is not None:
            counts["writes_with_ttl"] += 1
