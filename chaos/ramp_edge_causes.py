"""Probable causes of the edge checker's violations: the stampede defects the edge
scenarios found (`FINDINGS`), recognised from the history alone.

`check_edges` ends each violation it can attribute with `(probable cause Fn)`; a
violation without one matches none of them (look at it first). The attribution is a
diagnosis, not a rule: it never removes a violation. The scenarios found F1-F7 at
commit 46a9040 and F8 at 509067a; `FIXED` says which were fixed since (a violation
attributed to one of those is a regression).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .report import Violation

if TYPE_CHECKING:
    from .ramp_edge_model import Index, Read, Write

__all__ = ["FINDINGS", "FIXED", "annotate", "cause_of"]

FINDINGS: Mapping[str, str] = {
    "F1": "st.delete (a group write) over a key where a committed transaction is still "
    "pending: the delete does not mark the prepared version replaced, so once its "
    "tombstone expires a reader (ROUND2 'p') or the sweep commits the transaction there: "
    "its value comes back, without an expiry",
    "F2": "a tx.delete or TTL write whose COMMIT lands after its own expiry instant writes "
    "nothing (reply 3), yet the receipt is clean: the older value stays visible",
    "F3": "a receipt with pending keys: once every committed sibling has moved on, no "
    "reader and no sweep completes the pending keys (they roll forward only from a "
    "sibling that still holds the transaction): an acknowledged write is lost there",
    "F4": "ROUND2 returns a kept version that the key had moved past before the read "
    "began, when the key's newest value ran out (expired, evicted) before round 1 and a "
    "write lands between the rounds (its 'replaced since round 1' branch cannot tell)",
    "F5": "a late older write re-creates a key whose tombstone or TTL ran out (allowed); "
    "ROUND2 then returns it beside a newer transaction's siblings (its 'x' branch: "
    "fractured), or raises ReadError 'lost' once the newer version's record is collected",
    "F6": "a transaction committed at some keys and still pending at a key it deleted (or "
    "wrote with a TTL): once that tombstone's (or value's) instant passes before anyone "
    "completed it, the key's older current value is returned beside the transaction's "
    "other keys (fractured; the sweep's refused roll-forward marks the version replaced "
    "and ROUND2's 'x' branch returns the current value)",
    "F7": "a repairing group read completes one pending transaction, observes the group "
    "again and hands that observation to the strategy without looking for pending "
    "transactions again: a newer transaction that committed at one key meanwhile is "
    "restamped over by NewestWins (lost at its other keys) and the read returns a "
    "consistent group of two transactions' values",
    "F8": "(found at 509067a, after the F2 fix) a TTL write or delete whose COMMIT lands "
    "after its own expiry instant removes the older value but leaves an older "
    "transaction still pending at that key unmarked: a reader or the sweep then "
    "completes it there, and its value comes back, without an expiry",
}

FIXED: Mapping[str, str] = {
    **dict.fromkeys(("F1", "F2", "F3", "F4", "F5", "F6"), "6042e31"),
    "F7": "6eacab8",
    "F8": "cec3f2f",
}
"""The findings fixed since, and the commit that fixed them: a violation attributed to
one of these is a regression. None is open."""

_KEY = {
    "fractured-read": re.compile(r"but read key (\d+)="),
    "lost-acknowledged": re.compile(r"wrote key (\d+)="),
}
_READ_KEY = re.compile(r"read key (\d+)=")
_LOST = re.compile(r"key b'ramp:(\d+)' holds a value older than the transaction (\d+):")
_MOVED = ("deleted-comes-back", "expired-comes-back", "stale-read")


def _key_of(v: Violation) -> int | None:
    match = _KEY.get(v.kind, _READ_KEY).search(v.message)
    return None if match is None else int(match.group(1))


def _moved_cause(key: int, r: Read, u: Write, w: Write, index: Index, evicting: bool) -> str | None:
    if w.end > w.gone_instant(key):  # W's commit may have landed after its own instant
        return "F2" if u.acknowledged_at(key) else "F8"
    if not u.acknowledged_at(key) and any(
        g.kind == "gdel" and g.invoked >= u.invoked for g in index.gone_after(key, u.version)
    ):
        return "F1"
    ran_out = evicting or any(  # a newer value ran out before round 1 (invoke .. done)
        g.invoked < r.invoked and g.gone_instant(key) < r.done
        for g in index.gone_after(key, u.version)
    )
    return "F4" if r.rounds == 2 and ran_out else None


def _lost_cause(v: Violation, index: Index, late: int) -> str | None:
    """A final read that raised ReadError 'lost' on a quiet store, no eviction."""
    match = _LOST.search(v.message)
    if match is None:
        return None
    key, t = int(match.group(1)), index.by_version.get(int(match.group(2)))
    if t is not None and key in t.writes and not t.acknowledged_at(key):
        return "F6" if t.gone_instant(key) < float("inf") else None
    return "F5" if late else None


def _repaired_mix(r: Read, reads: Mapping[str, Read]) -> bool:
    """A repairing read of the same keys returned these very values, at or before `r`."""
    return any(
        o.kind == "gread" and o.repaired and o.values == r.values and o.invoked <= r.invoked
        for o in reads.values()
    )


def cause_of(v: Violation, reads: Mapping[str, Read], writes: Mapping[str, Write],
             index: Index, late: int, evicting: bool = False) -> str | None:  # fmt: skip
    """The finding that probably explains `v`, if one does (`evicting`: keys may have
    been evicted, which leaves no trace in the history)."""
    key = _key_of(v)
    ops = [*v.ops, "", "", ""]
    r, a, b = reads.get(ops[0]), writes.get(ops[1]), writes.get(ops[2])
    if v.kind == "no-final-read":
        return _lost_cause(v, index, late)
    if v.kind == "group-mix":
        return "F7" if r is not None and _repaired_mix(r, reads) else None
    if key is None or r is None or a is None:
        return None
    if v.kind in _MOVED and b is not None:
        return _moved_cause(key, r, a, b, index, evicting)
    if v.kind == "fractured-read" and b is not None:
        late_here = any(
            g.invoked < r.done and g.gone_instant(key) < b.end
            for g in index.gone_after(key, b.version)
        )
        if late_here:
            return "F5"
        ran_out = not a.acknowledged_at(key) and a.gone_instant(key) < r.invoked
        return "F6" if ran_out else None
    if v.kind == "lost-acknowledged":
        if key in a.pending:
            return "F3"
        if a.end <= a.gone_instant(key):
            return None
        u = writes.get(ops[2]) if ops[2] else None
        return "F8" if u is not None and not u.acknowledged_at(key) else "F2"
    return None


def annotate(out: list[Violation], reads: Sequence[Read], writes: Sequence[Write],
             index: Index, late: int, evicting: bool = False) -> list[str | None]:  # fmt: skip
    """Append `(probable cause Fn)` to every violation in `out` that one explains; the
    cause of each (None: unexplained)."""
    by_read = {r.op: r for r in reads}
    by_write = {w.op: w for w in writes}
    causes: list[str | None] = []
    for i, v in enumerate(out):
        cause = cause_of(v, by_read, by_write, index, late, evicting)
        if cause is not None:
            out[i] = Violation(v.kind, f"{v.message} (probable cause {cause})", v.ops)
        causes.append(cause)
    return causes
