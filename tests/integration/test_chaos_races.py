"""Chaos races: the checker's new rules on hand-made histories, and one short run of each
race scenario (deletes, expiry, late and retried writes, lost replies, clocks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos import check
from chaos.race_checker import parse_balance
from chaos.scenarios import SCENARIOS, Env, ScenarioRun, Timing, run_scenario
from stampede.testing import LocalCluster, LocalPrimaries

from .test_chaos import KEYS, Hist, both

# -- hand-made histories --------------------------------------------------------------------


def delete(
    h: Hist, op: str, t0: float, t1: float, stamp: tuple[int, str], status: str = "ok"
) -> None:
    h.add(t0, "invoke", op, f="delete", group="g", mode="stamp", keys=KEYS)
    h.add(t1, status, op, f="delete", version=stamp[0], token=stamp[1])


def nothing() -> dict[str, str | None]:
    return dict.fromkeys(KEYS, None)


def test_a_group_read_after_its_delete_may_be_not_found() -> None:
    """Written, deleted, then read as not found: no violation (not a stale read)."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    delete(h, "d:1", 2, 3, (6, "B"))
    h.read("r:1", 4, 5, nothing(), None, status="not_found", final=True)
    assert check(h.events).ok


def test_an_older_write_coming_back_after_a_delete_is_resurrected() -> None:
    """A read returning a write older than a delete completed before it began is caught."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=KEYS)  # delayed, landed late
    delete(h, "d:1", 2, 3, (6, "B"))
    h.read("r:1", 4, 5, both("w1:1"), (5, "A"))
    h.read("r:2", 6, 7, nothing(), None, status="not_found", final=True)
    assert h.kinds() == ["resurrected"]


def test_a_newer_write_after_a_delete_is_fine() -> None:
    """A write stamped after the delete brings the group back legitimately."""
    h = Hist()
    delete(h, "d:1", 0, 1, (6, "B"))
    h.write("w1:1", 2, 3, (7, "C"))
    h.read("r:1", 4, 5, both("w1:1"), (7, "C"), final=True)
    assert check(h.events).ok


def test_not_found_without_a_delete_is_stale() -> None:
    """Nothing read after an acknowledged write that nothing deleted is a stale read."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.read("r:1", 2, 3, nothing(), None, status="not_found", final=True)
    assert "stale-read" in h.kinds()


def test_an_older_write_after_a_newer_one_expired_is_resurrected() -> None:
    """Expiry is a delete too: an older write read after a newer one expired is caught."""
    h = Hist()
    h.write("w1:1", 0, 0.1, (5, "A"), status="unknown", sent=KEYS)
    h.write("w2:1", 0.2, 0.3, (7, "B"))
    h.events[-2]["ttl"] = 0.15  # the invoke of w2:1
    h.read("r:1", 1, 1.1, both("w1:1"), (5, "A"))
    h.read("r:2", 2, 2.1, nothing(), None, status="not_found", final=True)
    assert h.kinds() == ["resurrected"]


def test_an_expired_write_is_not_lost_and_not_found_is_fine() -> None:
    """An acknowledged write with a TTL that expired is neither lost nor a stale read."""
    h = Hist()
    h.write("w1:1", 0, 0.1, (5, "A"))
    h.events[-2]["ttl"] = 0.15
    h.read("r:1", 1, 1.1, nothing(), None, status="not_found", final=True)
    assert check(h.events).ok


def test_a_repair_older_than_a_completed_delete_is_stale() -> None:
    """A repair writing a stamp older than a delete done before its read began is caught."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=["g:a"])
    delete(h, "d:1", 2, 3, (6, "B"))
    h.repair("x:1", 4, 4.5, 5, ("w1:1", (5, "A")), (5, "Z"), "w1:1")
    h.read("r:1", 6, 7, nothing(), None, status="not_found", final=True)
    assert h.kinds() == ["stale-repair"]


def test_a_late_part_read_whole_before_it_was_sent_is_caught() -> None:
    """A write whose held part had not gone out cannot be read whole without a repair."""
    h = Hist()
    h.write("w1:1", 0, 3, (5, "A"))
    h.add(0.5, "fault", "f:1", kind="hold", write="w1:1", group="g", keys=["g:b"])
    h.add(2.5, "fault", "f:2", kind="late-send", write="w1:1", group="g", keys=["g:b"])
    h.read("r:1", 1, 2, both("w1:1"), (5, "A"))
    h.read("r:2", 4, 5, both("w1:1"), (5, "A"), final=True)
    assert h.kinds() == ["uncompleted-read"]


def test_a_retried_write_may_be_read_once_its_late_send_began() -> None:
    """A failed write resent whole (same stamp) later is readable after the resend."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=["g:a"])
    h.add(2, "fault", "f:1", kind="late-send", write="w1:1", group="g", keys=KEYS)
    h.read("r:1", 1.5, 1.8, both("w1:1"), (5, "A"))  # before the resend: caught
    h.read("r:2", 3, 4, both("w1:1"), (5, "A"), final=True)  # after it: fine
    kinds = [v.kind for v in check(h.events).violations]
    assert kinds == ["uncompleted-read"]


def test_a_repair_stamp_of_the_writes_version_is_not_a_mismatch() -> None:
    """A repair completing a write under its own token (same version) reads back fine;
    under another version it is a stamp mismatch."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=["g:a"])
    h.repair("x:1", 2, 2.5, 3, ("w1:1", (5, "A")), (5, "R"), "w1:1")
    h.read("r:1", 4, 5, both("w1:1"), (5, "R"), final=True)
    assert check(h.events).ok
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=["g:a"])
    h.repair("x:1", 2, 2.5, 3, ("w1:1", (5, "A")), (9, "R"), "w1:1")
    h.read("r:1", 4, 5, both("w1:1"), (9, "R"), final=True)
    assert h.kinds() == ["stamp-mismatch"]


def test_a_database_write_loaded_by_a_repair_is_not_a_phantom() -> None:
    """A write that died after its database row (nothing sent to Redis) may be read once a
    repair loaded it; its application version orders it."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 2, 3, (6, "B"), status="fail", sent=[])
    h.events[-1].update(version=None, token=None, app_version=6)
    h.repair("x:1", 4, 4.5, 5, ("w1:1", (5, "A")), (6, "R"), "w2:1")
    h.read("r:1", 6, 7, both("w2:1"), (6, "R"), final=True)
    assert check(h.events).ok


def deposit(h: Hist, did: str, t0: float, t1: float, amount: int, status: str = "ok") -> None:
    h.add(t0, "invoke", f"dep-{did}", f="deposit", group="bank", id=did, amount=amount)
    h.add(t1, status, f"dep-{did}", f="deposit")


def balance(h: Hist, op: str, t: float, payload: str) -> None:
    h.add(t, "invoke", op, f="balance", group="bank", final=True)
    h.add(t + 0.1, "ok", op, f="balance", payload=payload)


def test_deposits_applied_once_each_pass() -> None:
    """Acknowledged deposits listed once, an unknown one either way: no violation."""
    h = Hist()
    deposit(h, "a", 0, 1, 10)
    deposit(h, "b", 1, 2, 5, status="unknown")
    deposit(h, "c", 2, 3, 7, status="unknown")
    balance(h, "bal:1", 4, "15|a,b")
    assert check(h.events).ok


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ("20|a,a", "deposit-twice"),
        ("0|", "deposit-lost"),
        ("17|a,c", "deposit-phantom"),
        ("99|a", "balance-mismatch"),
        ("12|a,zz", "deposit-phantom"),
    ],
)
def test_deposit_rules(payload: str, kind: str) -> None:
    """Twice, lost, failed-but-applied, unknown id, and a balance that does not add up."""
    h = Hist()
    deposit(h, "a", 0, 1, 10)
    deposit(h, "c", 1, 2, 7, status="fail")
    balance(h, "bal:1", 4, payload)
    assert kind in h.kinds()


def test_parse_balance() -> None:
    assert parse_balance(None) == (0, [])
    assert parse_balance("12|a,b") == (12, ["a", "b"])
    assert parse_balance("junk") is None


def test_ordering_errors_on_unpoisoned_groups_are_wedges() -> None:
    """A write refused for ordering on a watched group nobody poisoned is a wedge; on a
    poisoned group it is the expected refusal."""
    h = Hist()
    h.add(0, "fault", "f:w", kind="clock-window", group="g", window=10)
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w1:2", 2, 3, (6, "B"), status="fail", sent=[])
    h.events[-1]["error"] = "ClockSkewError"
    h.read("r:1", 4, 5, both("w1:1"), (5, "A"), final=True)
    assert h.kinds() == ["wedged"]
    h.add(0, "fault", "f:p", kind="poison", group="g")
    assert check(h.events).ok


def test_turn_about_writes_out_of_order_are_reordered() -> None:
    """With no clock window, a write begun after another's ack must have the higher stamp;
    within a window, a lower one is tolerated."""
    h = Hist()
    h.add(0, "fault", "f:w", kind="clock-window", group="g", window=0)
    h.write("t0:1", 0, 1, (1005, "A"))
    h.write("t1:1", 2, 3, (1005, "0"))  # the same millisecond, the lower token
    h.read("r:1", 4, 5, both("t0:1"), (1005, "A"), final=True)
    assert h.kinds() == ["reordered"]
    h.events[0]["window"] = 100
    h.events[3]["version"] = 950
    assert check(h.events).ok


# -- one short run of each race scenario ----------------------------------------------------

SCENARIO = {s.name: s for s in SCENARIOS}
RACE_TIMING = Timing(duration=1.5, groups=8)


async def run(name: str, env: Env, tmp_path: Path) -> ScenarioRun:
    result = await run_scenario(SCENARIO[name], env, RACE_TIMING, workdir=tmp_path)
    messages = [v.message for v in result.report.violations[:5]]
    assert result.report.ok, (messages, result.history_path)
    assert result.torn_at_end == []
    return result


def counts(result: ScenarioRun) -> Any:
    return result.report.counts


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["shards", "cluster"])
async def test_refetch_scenario(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Refetch from PostgreSQL racing crashed, held and retried writers: no violation."""
    servers = request.getfixturevalue(
        "stampede_cluster" if kind == "cluster" else "stampede_primaries"
    )
    result = await run("refetch", Env(kind, servers), tmp_path)
    assert counts(result)["faults_hold"] > 0 and counts(result)["faults_late-send"] > 0


@pytest.mark.postgres
async def test_refetch_newest_scenario(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """NewestWins racing held and retried cache-aside writes: no violation."""
    await run("refetch-newest", Env("shards", stampede_primaries), tmp_path)


@pytest.mark.postgres
async def test_delete_scenario(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """Deletes and 150 ms TTLs racing held and retried older writes: nothing comes back."""
    result = await run("delete", Env("shards", stampede_primaries), tmp_path)
    assert counts(result)["deletes_ok"] > 0 and counts(result)["writes_with_ttl"] > 0


async def test_lost_reply_scenario(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """Replies lost after the server executed: writes idempotent, deposits applied once."""
    result = await run("lost-reply", Env("shards", stampede_primaries), tmp_path)
    assert counts(result)["deposits_ok"] > 0
    assert any("replies lost" in note and ": 0;" not in note for note in result.notes)


async def test_clock_scenario(stampede_cluster: LocalCluster, tmp_path: Path) -> None:
    """Skewed, year-ahead and poisoned clocks: nobody wedges, turn-about writes in order."""
    result = await run("clock", Env("cluster", stampede_cluster), tmp_path)
    assert counts(result)["writes_refused_ordering"] > 0
