"""Check a history, independently of stampede's own verdicts.

Pure: `check(events)` needs only the JSON lines of a run. Each value's payload names
the write that made it (`<writer>:<seq>:<key>`), so a read is judged by what it
returned, not by the stamps stampede judged it by. The rules (docs/reliability.md
explains them):

| kind                   | what is wrong                                                  |
| ---------------------- | -------------------------------------------------------------- |
| `mixed-read`           | a read reported consistent returned values of several writes,  |
|                        | a missing key, or (not found) a value                          |
| `wrong-key`            | a value is the payload its write meant for another key         |
| `phantom-value`        | a value no write of the history made                           |
| `uncompleted-read`     | a read returned a write that never completed although neither  |
|                        | its writer (commit mode: the record; stamp mode: every data    |
|                        | key) nor a repair that saw it could have made it whole         |
| `stale-read`           | a read returned a write older than one acknowledged before the |
|                        | read began (or nothing at all)                                 |
| `stamp-mismatch`       | a read's stamp is not the stamp of the write its values are    |
|                        | (nor, at the write's version, of a repair that saw that write: |
|                        | completed, or of unknown outcome)                              |
| `lost-write`           | an acknowledged write is not readable at the end and no        |
|                        | acknowledged write or repair with a higher stamp replaced it   |
| `stale-repair`         | a repair wrote a stamp or payloads older than a write that was |
|                        | acknowledged before the repair's read began                    |
| `final-not-consistent` | a group did not read consistent at the end                     |

A server that lost its data (a `kill` fault: SIGKILL, restarted empty) may take
acknowledged writes with it. A write is *at risk* from such a fault when it began
before the kill and touched a key (data, commit record or counter) that lived on
the killed server. A lost write at risk is listed in `lost_to_fault`, not counted
as a violation, and the stale-read, stale-repair and stamp-mismatch rules excuse
what such a loss explains. Every other lost write is a violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .history import WriteId, parse_payload
from .index import COMPLETING, Index, Op, Stamp, Write, as_stamp, read_stamp
from .race_checker import (
    check_races,
    count_races,
    expired_before,
    may_have_expired,
    stale_nothing,
    stale_value,
)
from .report import CheckReport, LostWrite, Violation

__all__ = ["CheckReport", "LostWrite", "Violation", "check"]


def _values_of(read: Op, report: CheckReport) -> WriteId | None:
    """The one write a consistent read returned (None: nothing found, or a violation)."""
    assert read.done is not None
    status = read.done.get("status")
    values: Mapping[str, Any] = read.done.get("values") or {}
    if status == "not_found":
        if any(v is not None for v in values.values()):
            report.violations.append(
                Violation(
                    "mixed-read", f"read {read.id} is not found but returned values", (read.id,)
                )
            )
        return None
    wids: set[WriteId] = set()
    for key, value in values.items():
        parsed = parse_payload(value)
        if parsed is None:
            report.violations.append(
                Violation(
                    "mixed-read",
                    f"read {read.id} of {read.group} is consistent but key {key} holds "
                    f"{'nothing' if value is None else 'a value no workload write made'}",
                    (read.id,),
                )
            )
            return None
        if parsed[1] != key:
            report.violations.append(
                Violation(
                    "wrong-key",
                    f"read {read.id}: key {key} holds the payload write {parsed[0]} made for "
                    f"key {parsed[1]}",
                    (read.id,),
                )
            )
        wids.add(parsed[0])
    if len(wids) != 1:
        report.violations.append(
            Violation(
                "mixed-read",
                f"read {read.id} of {read.group} is consistent but its values come from "
                f"{len(wids)} writes: {', '.join(sorted(wids))}",
                (read.id,),
            )
        )
        return None
    return wids.pop()


def _check_uncompleted(h: Index, read: Op, write: Write, report: CheckReport) -> None:
    """A write that never completed may be read only when someone could make it whole.

    Also a write still in flight when the read ended, when a `delay` fault held
    part of it: read whole before its held part went out, only a repair made it so.
    """
    if write.ok and (read.t1 >= write.op.t1 or not write.held):
        return
    sent = write.sent_by(read.t1)
    if sent is None:
        return
    group = read.group
    if str(read.invoke.get("mode")) == "commit":
        needed = {f"{group}:stampede:commit"}
    else:
        needed = set(write.keys)
    if needed <= sent:
        return
    for repair in h.repairs_of[group]:
        if repair.t0 <= read.t1 and write.wid in h.completed_by(repair):
            return
    report.violations.append(
        Violation(
            "uncompleted-read",
            f"read {read.id} of {group} returned write {write.wid} ({write.op.status}, "
            f"crash {write.op.done.get('crash') if write.op.done else None}), which had sent "
            f"only {sorted(sent)} when the read ended and which no repair had completed",
            (read.id, write.op.id),
        )
    )


def _check_stale_read(
    h: Index, read: Op, stamp: Stamp | None, wid: WriteId | None, report: CheckReport
) -> None:
    """No read returns less than a write (or delete) acknowledged before the read began.

    Nothing is less than any write, unless a delete or a deleting repair newer than
    it may have landed before the read ended, or it expired; a value read is
    `resurrected` when a newer delete or an expired newer write preceded the read.
    """
    write = h.newest_before(read.group, read.t0, read.t1)
    if stamp is None and wid is not None:
        written = h.writes.get(wid)
        stamp = None if written is None else written.order
    if stamp is None:
        if write is not None and write.stamp is not None:
            violation = stale_nothing(h, read, write)
            if violation is not None:
                report.violations.append(violation)
        return
    live = write is not None and not expired_before(write, read.t0)
    if write is not None and write.stamp is not None and write.stamp > stamp and live:
        report.violations.append(
            Violation(
                "stale-read",
                f"read {read.id} of {read.group} returned stamp {stamp[0]}:{stamp[1]}, older "
                f"than write {write.wid} acknowledged before the read began",
                (read.id, write.op.id),
            )
        )
        return
    violation = stale_value(h, read, stamp)
    if violation is not None:
        report.violations.append(violation)


def _checkas_stamp(h: Index, read: Op, write: Write, stamp: Stamp, report: CheckReport) -> None:
    """A consistent read's stamp is the stamp of the write its values came from, or of a
    repair that wrote those values under the write's version."""
    if write.stamp is None or write.stamp == stamp:
        return
    if write.wid in h.repair_stamps.get(stamp, ()) and stamp[0] == write.stamp[0]:
        return  # a repair completed the write under its own stamp, of the write's version
    if stamp[0] == write.stamp[0] and any(
        t0 < read.t1 and write.wid in seen for t0, seen in h.unsure_repairs.get(read.group, ())
    ):
        return  # the same, by a repair whose outcome is unknown (cancelled by its deadline)
    owner = h.by_stamp.get(stamp)
    if owner is not None and h.at_risk(owner, before=read.t1) is not None:
        return
    report.violations.append(
        Violation(
            "stamp-mismatch",
            f"read {read.id} of {read.group} returned the values of write {write.wid} under "
            f"stamp {stamp[0]}:{stamp[1]}, which is "
            + ("no write's" if owner is None else f"write {owner.wid}'s"),
            (read.id, write.op.id),
        )
    )


def _check_read(h: Index, read: Op, report: CheckReport) -> None:
    done = read.done
    if done is None or done["type"] != "ok":
        return
    if done.get("status") not in ("consistent", "not_found"):
        return
    wid = _values_of(read, report)
    stamp = read_stamp(done)
    consistent = done.get("status") == "consistent"
    _check_stale_read(h, read, stamp if consistent else None, wid, report)
    if wid is None:
        return
    write = h.writes.get(wid)
    if write is None:
        report.violations.append(
            Violation(
                "phantom-value", f"read {read.id} returned values of no write ({wid})", (read.id,)
            )
        )
        return
    _check_uncompleted(h, read, write, report)
    if stamp is not None:
        _checkas_stamp(h, read, write, stamp, report)


def _single_write(values: Mapping[str, Any]) -> WriteId | None:
    """The write every value came from, or None (nothing, foreign values, several writes)."""
    wids: set[WriteId] = set()
    for value in values.values():
        parsed = parse_payload(value)
        if parsed is None:
            return None
        wids.add(parsed[0])
    return wids.pop() if len(wids) == 1 else None


def _final_reads(h: Index) -> dict[str, Op]:
    finals: dict[str, Op] = {}
    for read in h.reads:
        if read.invoke.get("final") and read.done is not None:
            finals[read.group] = read  # reads are in time order: the last one wins
    return finals


def _newest_stamp(h: Index, group: str) -> Stamp | None:
    """The highest stamp of an acknowledged write or a completing repair of `group`."""
    stamps = [w.stamp for w in h.acked[group] if w.stamp is not None]
    for repair in h.repairs_of[group]:
        done = repair.done
        if done is not None and done["type"] == "ok" and done.get("action") in COMPLETING:
            stamp = as_stamp(done.get("stamp"))
            if stamp is not None:
                stamps.append(stamp)
    stamps += [stamp for _, stamp in h.tombstones(group)]
    return max(stamps, default=None)


def _check_lost(h: Index, report: CheckReport) -> None:
    """Every acknowledged write is readable at the end, or replaced by a newer one.

    Replaced: the final read's stamp, or an acknowledged write's or a completing
    repair's stamp, is higher than the write's.
    """
    finals = _final_reads(h)
    groups = {w.op.group for w in h.writes.values()}
    for group in sorted(groups - h.poisoned):
        final = finals.get(group)
        if (
            final is None
            or final.done is None
            or final.done["type"] != "ok"
            or (final.done.get("status") not in ("consistent", "not_found"))
        ):
            report.violations.append(
                Violation(
                    "final-not-consistent",
                    f"group {group} did not read consistent at the end",
                    () if final is None else (final.id,),
                )
            )
            continue
        final_wid = _single_write(final.done.get("values") or {})
        newer = [s for s in (read_stamp(final.done), _newest_stamp(h, group)) if s is not None]
        highest = max(newer, default=None)
        for write in h.acked[group]:
            assert write.stamp is not None
            if write.wid == final_wid or (highest is not None and highest > write.stamp):
                continue
            if may_have_expired(write, final.t1):
                continue  # its ttl counts from when it was issued: it may land expired
            _lost(h, write, final, report)


def _lost(h: Index, write: Write, final: Op, report: CheckReport) -> None:
    assert write.stamp is not None
    loss = h.at_risk(write)
    if loss is not None:
        report.lost_to_fault.append(
            LostWrite(
                write.wid,
                write.op.id,
                write.op.group,
                write.stamp,
                write.op.t1,
                loss.shard,
                tuple(sorted(loss.keys & write.touched())),
            )
        )
        return
    report.violations.append(
        Violation(
            "lost-write",
            f"write {write.wid} of {write.op.group} (stamp {write.stamp[0]}:{write.stamp[1]}) "
            "was acknowledged, is not readable at the end, and nothing newer replaced it",
            (write.op.id, final.id),
        )
    )


def _check_repair(h: Index, repair: Op, report: CheckReport) -> None:
    """A repair never writes data older than a write acknowledged before its read began."""
    done = repair.done
    if done is None or done["type"] != "ok" or done.get("action") not in COMPLETING:
        return
    stamp = as_stamp(done.get("stamp"))
    began = float(repair.invoke.get("began", repair.t0))
    payload_writes = [
        h.writes.get(p[0])
        for v in (done.get("values") or {}).values()
        if (p := parse_payload(v)) is not None
    ]
    for write in h.acked[repair.group]:
        assert write.stamp is not None
        if write.op.t1 >= began or h.at_risk(write, before=repair.t1) is not None:
            continue
        older = stamp is None or stamp < write.stamp
        older = older or any(
            pw is None or (pw.order is not None and pw.order < write.stamp) for pw in payload_writes
        )
        if older:
            report.violations.append(
                Violation(
                    "stale-repair",
                    f"repair {repair.id} of {repair.group} wrote data older than write "
                    f"{write.wid}, acknowledged before the repair's read began",
                    (repair.id, write.op.id),
                )
            )
            return


def _count(h: Index, report: CheckReport) -> None:
    c = report.counts
    for write in h.writes.values():
        c[f"writes_{write.op.status}"] += 1
        if write.ok and write.op.done is not None and write.op.done.get("superseded"):
            c["writes_superseded_on_arrival"] += 1
    for read in h.reads:
        done = read.done or {}
        c[f"reads_{read.status}"] += 1
        status = done.get("status")
        if read.status == "ok":
            c[f"reads_{status}"] += 1
        torn = done.get("repaired") or done.get("queued") or status == "torn"
        torn = torn or (read.status == "fail" and done.get("error") == "TornReadError")
        if torn:
            c["torn_reads_detected"] += 1
        elif read.status == "ok" and int(done.get("attempts", 1)) > 1:
            c["reads_retried_to_consistent"] += 1
    for repair in h.repairs:
        done = repair.done or {}
        c[f"repairs_{done.get('action', repair.status)}"] += 1
    for fault in h.faults:
        c[f"faults_{fault.get('kind')}"] += 1
    c["violations"] = len(report.violations)
    c["lost_to_fault"] = len(report.lost_to_fault)


def check(events: Iterable[Mapping[str, Any]]) -> CheckReport:
    """Check a history (the events of one run, any order); see the module table."""
    h = Index(events)
    report = CheckReport()
    for read in h.reads:
        _check_read(h, read, report)
    for repair in h.repairs:
        _check_repair(h, repair, report)
    _check_lost(h, report)
    report.violations += check_races(h)
    _count(h, report)
    count_races(h, report.counts)
    return report
