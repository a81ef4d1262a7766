"""Chaos: the checker on hand-made histories, the crash points, and short scenario runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from chaos import (
    CHAOS_REPAIR,
    Crash,
    CrashPoint,
    CrashStyle,
    FaultyTopology,
    History,
    InjectedCrash,
    RecordingStampede,
    check,
    load_events,
    payload_of,
)
from chaos.history import Event
from chaos.scenarios import SCENARIOS, Env, Timing, run_scenario
from chaos.workload import make_layout
from stampede import Envelope, Mode, Options, Stampede
from stampede._kept import drop_kept
from stampede.repair import RepairContext
from stampede.results import RepairAction, RepairOutcome
from stampede.testing import LocalCluster, LocalPrimaries
from stampede.topology._shards import Shards
from stampede.verdict import Observation, Verdict
from stampede.wire import new_token

from ..support import FAST

KEYS = ["g:a", "g:b"]
TEST_TIMING = Timing(duration=1.5, groups=8)


class Hist:
    """Hand-made histories: events with explicit times, payloads naming their writes."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, t: float, event_type: str, op: str, **fields: Any) -> None:
        self.events.append({"t": t, "type": event_type, "op": op, **fields})

    def write(
        self,
        wid: str,
        t0: float,
        t1: float,
        stamp: tuple[int, str],
        *,
        status: str = "ok",
        mode: str = "stamp",
        sent: list[str] | None = None,
        group: str = "g",
        keys: list[str] = KEYS,
    ) -> None:
        writer, seq = wid.split(":")
        values = {k: payload_of(writer, int(seq), k).decode() for k in keys}
        self.add(t0, "invoke", wid, f="write", group=group, mode=mode, keys=keys, values=values)
        done: dict[str, Any] = {"f": "write", "version": stamp[0], "token": stamp[1]}
        if status != "ok":
            done.update(sent=keys if sent is None else sent, error="InjectedCrash")
        self.add(t1, status, wid, **done)

    def read(
        self,
        op: str,
        t0: float,
        t1: float,
        values: dict[str, str | None],
        stamp: tuple[int, str] | None,
        *,
        status: str = "consistent",
        mode: str = "stamp",
        final: bool = False,
        group: str = "g",
    ) -> None:
        payloads: dict[str, str | None] = {}
        for key, wid in values.items():
            if wid is None:
                payloads[key] = None
            else:
                writer, seq = wid.split(":")
                payloads[key] = payload_of(writer, int(seq), key).decode()
        self.add(t0, "invoke", op, f="read", group=group, mode=mode, keys=list(values), final=final)
        version, token = stamp if stamp is not None else (None, None)
        self.add(
            t1, "ok", op, f="read", status=status, values=payloads, version=version, token=token
        )

    def repair(
        self,
        op: str,
        began: float,
        t0: float,
        t1: float,
        seen: tuple[str, tuple[int, str]],
        stamp: tuple[int, str],
        wrote: str,
        *,
        action: str = "rewritten",
    ) -> None:
        wid, seen_stamp = seen
        writer, seq = wid.split(":")
        seen_map = {k: [list(seen_stamp), payload_of(writer, int(seq), k).decode()] for k in KEYS}
        self.add(t0, "invoke", op, f="repair", group="g", mode="stamp", began=began, seen=seen_map)
        w, s = wrote.split(":")
        values = {k: payload_of(w, int(s), k).decode() for k in KEYS}
        self.add(t1, "ok", op, f="repair", action=action, stamp=list(stamp), values=values)

    def kinds(self) -> list[str]:
        return sorted({v.kind for v in check(self.events).violations})


def both(wid: str) -> dict[str, str | None]:
    return dict.fromkeys(KEYS, wid)


# -- the checker on hand-made histories ---------------------------------------------------


def test_clean_history_passes() -> None:
    """Whole reads, a newer write superseding an older one, a final read: no violation."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.read("r:1", 2, 3, both("w1:1"), (5, "A"))
    h.write("w2:1", 4, 5, (7, "B"))
    h.read("r:2", 6, 7, both("w2:1"), (7, "B"), final=True)
    report = check(h.events)
    assert report.ok and not report.lost_to_fault
    assert report.counts["writes_ok"] == 2 and report.counts["reads_consistent"] == 2


def test_mixed_read_is_caught() -> None:
    """A read reported consistent whose values come from two writes is a violation."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 0, 1, (7, "B"))
    h.read("r:1", 2, 3, {"g:a": "w1:1", "g:b": "w2:1"}, (7, "B"))
    h.read("r:2", 4, 5, both("w2:1"), (7, "B"), final=True)
    assert h.kinds() == ["mixed-read"]


def test_not_found_with_values_and_phantoms_are_caught() -> None:
    """Values under a not-found verdict, and values no write made, are violations."""
    h = Hist()
    h.read("r:1", 0, 1, both("w9:9"), None, status="not_found")
    h.read("r:2", 2, 3, both("w9:9"), (1, "Z"))
    assert h.kinds() == ["mixed-read", "phantom-value"]


def test_commit_read_of_a_write_cut_between_shards_is_caught() -> None:
    """Commit mode: a write that never sent its record, read whole without a repair, is caught."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", mode="commit", sent=["g:a"])
    h.read("r:1", 2, 3, both("w1:1"), (5, "A"), mode="commit", final=True)
    assert h.kinds() == ["uncompleted-read"]


def test_uncompleted_write_may_be_read_once_sent_or_repaired() -> None:
    """A crashed write is readable when its record was sent, or after a repair completed it."""
    h = Hist()
    h.write(
        "w1:1", 0, 1, (5, "A"), status="unknown", mode="commit", sent=[*KEYS, "g:stampede:commit"]
    )
    h.read("r:1", 2, 3, both("w1:1"), (5, "A"), mode="commit")
    h.write("w2:1", 4, 5, (7, "B"), status="unknown", mode="commit", sent=["g:a"])
    h.repair("x:1", 6, 6.5, 7, ("w2:1", (7, "B")), (7, "B"), "w2:1")
    h.read("r:2", 8, 9, both("w2:1"), (7, "B"), mode="commit", final=True)
    assert check(h.events).ok


def test_stamp_mode_needs_every_data_key_sent() -> None:
    """Stamp mode: a crashed write is readable whole only if all its data keys were sent."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"), status="unknown", sent=KEYS)
    h.read("r:1", 2, 3, both("w1:1"), (5, "A"))
    h.write("w2:1", 4, 5, (7, "B"), status="fail", sent=[])
    h.read("r:2", 6, 7, both("w2:1"), (7, "B"), final=True)
    assert h.kinds() == ["uncompleted-read"]


def test_lost_write_is_caught() -> None:
    """An acknowledged write that the end state neither holds nor supersedes is lost."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 2, 3, (7, "B"))
    h.read("r:1", 4, 5, both("w1:1"), (5, "A"), final=True)
    report = check(h.events)
    assert sorted(v.kind for v in report.violations) == ["lost-write", "stale-read"]
    assert "w2:1" in next(v for v in report.violations if v.kind == "lost-write").message


def test_a_write_kept_out_by_a_newer_stamp_is_superseded_not_lost() -> None:
    """Under clock skew a later write with a lower stamp is superseded, not lost."""
    h = Hist()
    h.write("ahead:1", 0, 1, (9, "A"))
    h.write("behind:1", 2, 3, (4, "B"))  # the guard kept it out: receipt.superseded
    h.read("r:1", 4, 5, both("ahead:1"), (9, "A"), final=True)
    assert check(h.events).ok


def test_writes_lost_with_a_killed_shard_are_listed_not_violations() -> None:
    """A write that touched the killed shard before the kill is listed as lost to the fault."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.add(2, "fault", "fault:1", kind="kill", shard="s2", keys=["g:b"])
    h.read("r:1", 3, 4, {"g:a": None, "g:b": None}, None, status="not_found", final=True)
    report = check(h.events)
    assert report.ok
    (lost,) = report.lost_to_fault
    assert (lost.write, lost.shard, lost.keys_on_shard) == ("w1:1", "s2", ("g:b",))


def test_writes_after_the_kill_are_not_excused() -> None:
    """A write that began after the kill and is lost anyway is a violation."""
    h = Hist()
    h.add(0, "fault", "fault:1", kind="kill", shard="s2", keys=["g:b"])
    h.write("w1:1", 1, 2, (5, "A"))
    h.read("r:1", 3, 4, {"g:a": None, "g:b": None}, None, status="not_found", final=True)
    assert "lost-write" in h.kinds()


def test_repair_that_replaces_newer_data_is_caught() -> None:
    """A repair writing a write older than one acknowledged before its read began is caught."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 2, 3, (7, "B"))
    h.repair("x:1", 4, 4.5, 5, ("w2:1", (7, "B")), (8, "C"), "w1:1")
    h.read("r:1", 6, 7, both("w2:1"), (7, "B"), final=True)
    assert h.kinds() == ["stale-repair"]


def test_repair_racing_a_write_that_began_after_its_read_is_fine() -> None:
    """Only writes acknowledged before the repair's read began bind the repair."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 2, 5, (7, "B"))  # acknowledged after the repair's read began
    h.repair("x:1", 4, 4.5, 4.8, ("w1:1", (5, "A")), (5, "A"), "w1:1")
    h.read("r:1", 6, 7, both("w2:1"), (7, "B"), final=True)
    assert check(h.events).ok


def test_stamp_that_is_not_the_values_write_is_caught() -> None:
    """A consistent read must carry the stamp of the write its values came from."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 0, 1, (3, "B"))
    h.read("r:1", 2, 3, both("w2:1"), (5, "A"), final=True)
    assert "stamp-mismatch" in h.kinds()


def test_a_write_rolled_forward_by_a_cancelled_repair_is_no_stamp_mismatch() -> None:
    """A repair cancelled by its read's deadline has no known outcome: it may have
    re-stamped the write it saw (its version, a token of its own) before it stopped,
    so a read of that write under such a stamp is no violation; under a stamp of
    another version, or with no repair that saw the write, it still is."""

    def history(repair_saw: str, version: int) -> Hist:
        h = Hist()
        h.write("w1:1", 0, 1, (5, "A"))
        wid, seen_stamp = repair_saw, (5, "A")
        writer, seq = wid.split(":")
        seen = {k: [list(seen_stamp), payload_of(writer, int(seq), k).decode()] for k in KEYS}
        h.add(2, "invoke", "x:1", f="repair", group="g", mode="stamp", began=1.5, seen=seen)
        h.add(3, "fail", "x:1", f="repair", error="CancelledError")
        h.read("r:1", 4, 5, both("w1:1"), (version, "R"), final=True)
        return h

    assert check(history("w1:1", 5).events).ok
    assert "stamp-mismatch" in history("w1:1", 6).kinds()  # another version
    assert "stamp-mismatch" in history("w9:1", 5).kinds()  # the repair saw another write


def test_group_without_a_consistent_final_read_is_caught() -> None:
    """Every written group must read consistent at the end."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    assert h.kinds() == ["final-not-consistent"]


def test_history_round_trips_through_json_lines(tmp_path: Path) -> None:
    """A history saved as JSON lines checks the same; a line cut by a kill is skipped."""
    h = Hist()
    h.write("w1:1", 0, 1, (5, "A"))
    h.write("w2:1", 2, 3, (7, "B"))
    h.read("r:1", 4, 5, both("w1:1"), (5, "A"), final=True)
    path = tmp_path / "h.jsonl"
    history = History(path)
    history.extend(h.events)
    history.dump(path)
    with path.open("a") as out:
        out.write('{"t": 9, "type": "ok", "op": "cut sho')
    loaded = load_events(path)
    assert loaded == sorted(h.events, key=lambda e: e["t"])
    assert check(loaded).violations == check(h.events).violations != []
    assert json.loads(path.read_text().splitlines()[0])["op"] == "w1:1"
    history.close()


# -- fault injection and recording on real servers ----------------------------------------


@pytest.fixture
async def shards(stampede_primaries: LocalPrimaries) -> AsyncIterator[Shards]:
    topology = Shards(stampede_primaries.urls, options=FAST)
    yield topology
    await topology.aclose()


def commit_writer(topology: Shards, history: History) -> tuple[RecordingStampede, FaultyTopology]:
    faulty = FaultyTopology(topology, history=history)
    st = Stampede(faulty, options=Options(mode=Mode.COMMIT))
    return RecordingStampede(st, history, process="w"), faulty


@pytest.mark.parametrize(
    ("point", "data", "record", "outcome"),
    [
        (CrashPoint.BEFORE_FIRST_SHARD, "none", False, "fail"),
        (CrashPoint.BETWEEN_SHARDS, "one shard", False, "unknown"),
        (CrashPoint.BEFORE_COMMIT_RECORD, "all", False, "unknown"),
        (CrashPoint.AFTER_LAST_WRITE, "all", True, "unknown"),
    ],
)
async def test_each_crash_point_leaves_what_it_says(
    shards: Shards, point: CrashPoint, data: str, record: bool, outcome: str
) -> None:
    """Each crash point leaves exactly its documented part of a commit-mode write in Redis."""
    history = History()
    st, faulty = commit_writer(shards, history)
    layout = make_layout(shards, 1)
    ((group, keys),) = layout.groups.items()
    faulty.arm(Crash(point))
    with pytest.raises(InjectedCrash):
        await st.write(group, {k: payload_of("w", 1, k) for k in keys})
    raw = await shards.fetch([k.encode() for k in keys])
    record_raw = (await shards.fetch([f"{group}:stampede:commit".encode()]))[0]
    first = shards.shard_of(keys[0].encode())
    landed = [k for k, v in zip(keys, raw, strict=True) if v is not None]
    expected = {
        "none": [],
        "one shard": [k for k in keys if shards.shard_of(k.encode()) == first],
        "all": keys,
    }[data]
    assert landed == expected and (record_raw is not None) is record
    done = history.events[-1]
    assert (done["type"], done["crash"]) == (outcome, point.value)
    assert set(done["sent"]) == set(expected) | ({f"{group}:stampede:commit"} if record else set())


async def test_cancelled_writer_is_recorded_as_unknown(shards: Shards) -> None:
    """A writer task cancelled between shards dies cancelled; its write is recorded unknown."""
    history = History()
    st, faulty = commit_writer(shards, history)
    ((group, keys),) = make_layout(shards, 1).groups.items()
    faulty.arm(Crash(CrashPoint.BETWEEN_SHARDS, CrashStyle.CANCEL))
    task = asyncio.create_task(st.write(group, {k: payload_of("w", 1, k) for k in keys}))
    await asyncio.wait([task])
    assert task.cancelled()
    kinds = [(e["type"], e.get("kind")) for e in history.events]
    assert kinds == [("invoke", None), ("fault", "crash"), ("unknown", None)]


async def test_repairs_are_recorded_with_the_read_that_ran_them(shards: Shards) -> None:
    """A read that repairs records the repair: what it saw, when its read began, what it wrote."""
    history = History()
    st, faulty = commit_writer(shards, history)
    ((group, keys),) = make_layout(shards, 1).groups.items()
    await st.write(group, {k: payload_of("w", 1, k) for k in keys})
    faulty.arm(Crash(CrashPoint.BETWEEN_SHARDS))
    with pytest.raises(InjectedCrash):
        await st.write(group, {k: payload_of("w", 2, k) for k in keys})
    await drop_kept(shards, keys)  # the crash is older than the grace window
    reader = RecordingStampede(Stampede(faulty), history, process="r")
    result = await reader.read(group, keys, mode="commit", repair=CHAOS_REPAIR, final=True)
    assert result.repaired and set(result.values.values()) == {payload_of("w", 2, k) for k in keys}
    invoke = next(e for e in history.events if e.get("f") == "repair" and e["type"] == "invoke")
    read = next(e for e in history.events if e.get("f") == "read" and e["type"] == "invoke")
    assert invoke["began"] == read["t"] and invoke["parent"] == read["op"]
    assert check(history.events).ok


class StaleRepair:
    """A deliberately wrong strategy: rewrites the group with the payloads of write w:1."""

    name = "stale"

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        newest = obs.newest()
        assert newest is not None
        version, token = newest.version + 1, new_token()
        payloads = {k: payload_of("w", 1, k) for k in obs.keys}
        raw = [Envelope(version, token, p).encode() for p in payloads.values()]
        await ctx.topology.write_guarded(list(obs.keys), raw, version=version, token=token)
        values: dict[bytes, bytes | None] = dict(payloads)
        return RepairOutcome(
            obs.group, RepairAction.REWRITTEN, None, values, True, (version, token)
        )


async def test_checker_catches_a_repair_that_restores_old_data(shards: Shards) -> None:
    """End to end: a strategy that writes an older write's payloads is flagged stale-repair."""
    history = History()
    st, faulty = commit_writer(shards, history)
    ((group, keys),) = make_layout(shards, 1).groups.items()
    for seq in (1, 2):
        await st.write(group, {k: payload_of("w", seq, k) for k in keys}, mode="stamp")
    faulty.arm(Crash(CrashPoint.BETWEEN_SHARDS))
    with pytest.raises(InjectedCrash):
        await st.write(group, {k: payload_of("w", 3, k) for k in keys}, mode="stamp")
    await drop_kept(shards, keys)  # the crash is older than the grace window
    reader = RecordingStampede(Stampede(faulty), history, process="r")
    await reader.read(group, keys, repair=StaleRepair())
    await reader.read(group, keys, final=True)
    kinds = {v.kind for v in check(history.events).violations}
    assert {"stale-repair", "stamp-mismatch"} <= kinds


# -- short scenario runs --------------------------------------------------------------------

SCENARIO = {s.name: s for s in SCENARIOS}


async def run(name: str, env: Env, tmp_path: Path) -> Any:
    result = await run_scenario(SCENARIO[name], env, TEST_TIMING, workdir=tmp_path)
    assert result.history_path is not None
    assert result.report.ok, [v.message for v in result.report.violations[:5]]
    assert result.torn_at_end == []
    return result


async def test_crash_scenario_on_shards(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """Writers crashed at every point, raised and cancelled: no violation, all groups whole."""
    result = await run("crash", Env("shards", stampede_primaries), tmp_path)
    assert set(result.report.counts) >= {"faults_crash", "repairs_rewritten"}
    notes = " ".join(result.notes)
    assert all(point.value in notes for point in CrashPoint)
    styles = {e.get("style") for e in load_events(result.history_path)}
    assert {"raise", "cancel"} <= styles
    assert not result.report.lost_to_fault
    assert_checker_sees_tampering(load_events(result.history_path))


def assert_checker_sees_tampering(events: list[Event]) -> None:
    """The real history, tampered with: a mixed read and a lost write are both caught."""
    invokes = {e["op"]: e for e in events if e["type"] == "invoke"}
    writes = [e for e in events if e["type"] == "ok" and invokes[e["op"]]["f"] == "write"]
    final = next(e for e in reversed(events) if e["type"] == "ok" and invokes[e["op"]].get("final"))
    group = invokes[final["op"]]["group"]
    older = next(w for w in writes if invokes[w["op"]]["group"] == group)
    older_values = invokes[older["op"]]["values"]
    key = next(iter(older_values))
    tampered = [dict(e) for e in events]
    for event in tampered:
        if event["op"] == final["op"] and event["type"] == "ok":
            event["values"] = {**event["values"], key: older_values[key]}
    assert "mixed-read" in {v.kind for v in check(tampered).violations}
    for event in tampered:
        if event["op"] == final["op"] and event["type"] == "ok":
            event.update(values=older_values, version=older["version"], token=older["token"])
    kinds = {v.kind for v in check(tampered).violations}
    assert {"lost-write", "stale-read"} <= kinds, kinds


async def test_crash_scenario_on_cluster(stampede_cluster: LocalCluster, tmp_path: Path) -> None:
    """The crash scenario holds on a real cluster too."""
    result = await run("crash", Env("cluster", stampede_cluster), tmp_path)
    assert result.report.counts["faults_crash"] > 0


@pytest.mark.parametrize("kind", ["shards", "cluster"])
async def test_kill_scenario_lists_only_writes_of_the_killed_shard(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A primary restarted empty loses writes; each is listed with its keys on that shard."""
    servers = request.getfixturevalue(
        "stampede_cluster" if kind == "cluster" else "stampede_primaries"
    )
    result = await run("kill", Env(kind, servers), tmp_path)
    lost = result.report.lost_to_fault
    assert lost, "the cold tagged group on the killed shard should lose its last write"
    (kill,) = [e for e in load_events(result.history_path) if e.get("kind") == "kill"]
    assert all(w.shard == kill["shard"] and set(w.keys_on_shard) <= set(kill["keys"]) for w in lost)


async def test_pause_scenario(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """A primary paused past the socket timeout: unknown writes, no violation."""
    result = await run("pause", Env("shards", stampede_primaries), tmp_path)
    assert result.report.counts["faults_pause"] == 1 and result.report.counts["writes_unknown"] > 0


async def test_migrate_scenario(stampede_cluster: LocalCluster, tmp_path: Path) -> None:
    """Slots migrated under load: no violation, every group whole."""
    result = await run("migrate", Env("cluster", stampede_cluster), tmp_path)
    assert result.report.counts["faults_migrate"] == 3


async def test_worker_scenario(stampede_primaries: LocalPrimaries, tmp_path: Path) -> None:
    """A worker SIGKILLed with jobs in hand: the second one finishes, nothing is lost."""
    result = await run("worker", Env("shards", stampede_primaries), tmp_path)
    counts = result.report.counts
    assert counts["faults_worker-kill"] == 1 and counts["repairs_queued"] > 0
    repairs = [e for e in load_events(result.history_path) if e.get("f") == "repair"]
    workers = {e.get("proc") for e in repairs if e["type"] == "invoke"}
    assert {"worker1", "worker2"} & workers


async def test_skew_scenario(stampede_cluster: LocalCluster, tmp_path: Path) -> None:
    """Writers 1.5 s apart: slow clocks' writes are superseded, never lost or mixed."""
    result = await run("skew", Env("cluster", stampede_cluster), tmp_path)
    assert result.report.counts["writes_superseded_on_arrival"] > 0
