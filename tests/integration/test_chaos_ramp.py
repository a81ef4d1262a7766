"""The `ramp` chaos scenario: its checker on hand-made histories, and one short run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.env import Env, Timing
from chaos.ramp_checker import (
    RampOp,
    check_lines,
    check_ramp,
    export_lines,
    format_op,
    parse_line,
)
from chaos.scenarios import SCENARIOS, run_scenario

CLEAN = """
w(1,11,1,1)
w(2,12,1,1)
w(1,21,2,2)
w(2,22,2,2)
w(3,23,2,2)
r(1,21,9,3)
r(2,22,9,3)
r(1,11,9,4)
r(2,12,9,4)
r(3,0,9,4)
r(1,21,9,5)
r(3,23,9,5)
"""


def kinds(lines: list[str]) -> list[str]:
    return [v.kind for v in check_lines(lines)]


def test_a_read_atomic_history_passes() -> None:
    """Whole transactions, and an older transaction read whole (txn 4), are fine: read
    atomicity does not ask for the newest value, only for no part of one."""
    assert check_lines(CLEAN.splitlines()) == []


def test_a_fractured_read_is_caught() -> None:
    """Txn 2 wrote keys 1 and 2; a read sees key 1 of txn 2 and key 2 of the older txn 1."""
    history = [*CLEAN.splitlines(), "r(1,21,9,6)", "r(2,12,9,6)"]
    violations = check_lines(history)
    assert [v.kind for v in violations] == ["fractured-read"]
    assert "key 2=12 (txn 1)" in violations[0].message


def test_reading_nothing_beside_a_transaction_is_fractured() -> None:
    """Key 3 read empty beside key 2 of txn 2, which wrote key 3 too."""
    assert kinds([*CLEAN.splitlines(), "r(2,22,9,6)", "r(3,0,9,6)"]) == ["fractured-read"]


def test_newer_sibling_is_not_fractured() -> None:
    """Key 1 of txn 1 beside key 2 of the newer txn 7 (which wrote only key 2) is allowed;
    beside key 2 of txn 2, which wrote key 1 too, it is not."""
    assert kinds([*CLEAN.splitlines(), "w(2,42,4,7)", "r(1,11,9,8)", "r(2,42,9,8)"]) == []
    assert kinds([*CLEAN.splitlines(), "r(1,11,9,6)", "r(2,22,9,6)"]) == ["fractured-read"]


def test_phantom_wrong_key_and_bad_lines() -> None:
    assert kinds([*CLEAN.splitlines(), "r(1,99,9,6)"]) == ["phantom-value"]
    assert kinds([*CLEAN.splitlines(), "r(1,22,9,6)"]) == ["wrong-key"]
    assert kinds(["w(1,5,1,1)", "w(2,5,1,1)"]) == ["bad-history"]
    assert kinds(["x(1,2,3,4)"]) == ["bad-history"]


def test_lines_round_trip() -> None:
    op = RampOp("r", 7, 1000003, 1001, 42)
    assert format_op(op) == "r(7,1000003,1001,42)"
    assert parse_line(format_op(op)) == op and parse_line("  ") is None


def _events() -> list[dict[str, Any]]:
    """Two transactions (the second's version lower: it is the older one), an aborted
    one, and reads."""
    t = iter(range(100))

    def ev(type_: str, op: str, **fields: Any) -> dict[str, Any]:
        return {"t": float(next(t)), "type": type_, "op": op, **fields}

    w = {"f": "txn", "txn": 1}
    return [
        ev("invoke", "w1:0", **w, session=1, version=2048 + 1, writes={"1": 11, "2": 12}),
        ev("invoke", "w2:0", **w, session=2, version=1024 + 2, writes={"1": 21, "2": 22}),
        ev("ok", "w1:0", f="txn"),
        ev("invoke", "w3:0", **w, session=3, version=4096 + 3, writes={"1": 31, "3": 33}),
        ev("fail", "w3:0", f="txn", error="TransactionAborted"),
        ev("invoke", "r9:0", f="rread", session=9, txn=1, keys=[1, 2]),
        ev("ok", "r9:0", f="rread", values={"1": 11, "2": 22}, rounds=1),
        ev("invoke", "r9:1", f="rread", session=9, txn=2, keys=[1, 3]),
        ev("ok", "r9:1", f="rread", values={"1": 31, "3": None}, rounds=1),
        ev("fault", "fault:0", kind="worker-kill"),
    ]  # fmt: skip


def test_export_orders_writers_by_version_and_drops_aborted() -> None:
    """Session 2's transaction has the lower version, so it is txn 1; the aborted
    transaction is not exported (its value reads as aborted-read)."""
    lines = export_lines(_events())
    assert lines == [
        "w(1,21,2,1)", "w(2,22,2,1)", "w(1,11,1,2)", "w(2,12,1,2)",
        "r(1,11,9,3)", "r(2,22,9,3)", "r(1,31,9,4)", "r(3,0,9,4)",
    ]  # fmt: skip
    report = check_ramp(_events())
    # read 3: key 1 of txn 2 (version 2049) beside key 2 of txn 1 (1026): fractured
    assert sorted(v.kind for v in report.violations) == ["aborted-read", "fractured-read"]
    assert report.counts["writes_ok"] == 1 and report.counts["writes_fail"] == 1
    assert report.counts["writes_unknown"] == 1 and report.counts["faults_worker-kill"] == 1


async def test_one_short_ramp_run_on_shards(stampede_primaries: Any, tmp_path: Path) -> None:
    """The whole scenario, short: cancelled and SIGKILLed writers, a paused primary;
    no violation, and a text history beside the JSON lines that checks clean."""
    scenario = next(s for s in SCENARIOS if s.name == "ramp")
    timing = Timing(duration=1.0, groups=2, pause=0.6)
    run = await run_scenario(scenario, Env("shards", stampede_primaries), timing, workdir=tmp_path)
    assert run.report.ok, run.report.violations[:5]
    c = run.report.counts
    assert c["reads_ok"] > 0 and c["writes_ok"] >= 100 and c["faults_crash"] >= 1
    assert c["faults_pause"] == 1
    assert c["faults_worker-kill"] + c["faults_worker-exit"] >= 1
    assert run.history_path is not None
    text = run.history_path.with_suffix(".txt").read_text().splitlines()
    assert text and check_lines(text) == []
    assert any(line.startswith("r(") for line in text)
