"""The read-atomic edge chaos scenarios (`chaos.ramp_edges`): the edge checker's rules on
hand-made histories, one short run of each scenario on primaries, and the stampede
defects those runs found (F1-F8 of `chaos.ramp_edge_causes.FINDINGS`), each reproduced
step by step as a regression test (all fixed: `chaos.ramp_edge_causes.FIXED`)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from chaos.env import Env, Timing
from chaos.ramp_checker import check_lines
from chaos.ramp_edge_causes import FIXED
from chaos.ramp_edge_checker import DELETE_RULES, EVICT_RULES, REPAIR_RULES, EdgeRules, check_edges
from chaos.scenarios import RAMP_EDGE_SCENARIOS, run_scenario
from stampede import RetryPolicy, Stampede
from stampede._lua import Script
from stampede._txn.read import read_atomic
from stampede._txn.scripts import COMMIT, PREPARE, ROUND2
from stampede._txn.write import run_units
from stampede.errors import ShardUnavailable
from stampede.repair import NewestWins, sweep_versions
from stampede.testing.faults import DelegatingTopology
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import eventually, gone, open_stampede, raw_value, spread_keys

LOOSE = dataclasses.replace(DELETE_RULES, final_required=False)


class Hist:
    """A hand-made history: writes and reads at given instants (seconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def _add(self, t: float, kind: str, op: str, **fields: Any) -> None:
        self.events.append({"t": t, "type": kind, "op": op, **fields})

    def txn(self, op: str, version: int, writes: dict[int, int | None], t: float, *,
            done: float | None = None, end: str = "ok", ttl: float | None = None,
            grace: float | None = None, pending: Sequence[int] = (),
            f: str = "txn") -> None:  # fmt: skip
        extra = {k: v for k, v in (("ttl", ttl), ("grace", grace)) if v is not None}
        self._add(t, "invoke", op, f=f, session=1, version=version,
                  writes={str(k): v for k, v in writes.items()}, **extra)  # fmt: skip
        pend = [f"ramp:{k}" for k in pending]
        self._add(t + 0.001 if done is None else done, end, op, f=f, pending=pend)

    def read(self, op: str, values: dict[int, int | None], t: float, *, f: str = "rread",
             final: bool = False, end: str = "ok", **extra: Any) -> None:  # fmt: skip
        self._add(t, "invoke", op, f=f, keys=list(values), **({"final": True} if final else {}))
        self._add(t + 0.001, end, op, f=f, values={str(k): v for k, v in values.items()}, **extra)

    def kinds(self, rules: EdgeRules = LOOSE) -> list[str]:
        events = sorted(self.events, key=lambda e: float(e["t"]))
        return sorted(v.kind for v in check_edges(events, rules).violations)


def two_txns() -> Hist:
    """T1 (version 10) writes keys 1 and 2; T2 (20) writes key 1 and deletes key 2."""
    h = Hist()
    h.txn("w:1", 10, {1: 11, 2: 12}, 0.0)
    h.txn("w:2", 20, {1: 21, 2: None}, 1.0, grace=0.2)
    return h


def test_whole_transactions_deletes_and_an_older_snapshot_pass() -> None:
    """T2's value beside T2's delete, and T1 whole before T2, are read atomic."""
    h = two_txns()
    h.read("r:1", {1: 11, 2: 12}, 0.5)
    h.read("r:2", {1: 21, 2: None}, 2.0, final=True)
    h.read("r:3", {1: 21, 2: None}, 2.5, f="raw", tombs={"2": 20}, expiry={"1": -1, "2": 9})
    assert h.kinds(DELETE_RULES) == []


def test_a_fractured_read_is_caught() -> None:
    """T2's value at key 1 beside T1's older value at key 2, which T2 deleted."""
    h = two_txns()
    h.read("r:1", {1: 21, 2: 12}, 2.0)
    assert h.kinds() == ["deleted-comes-back", "fractured-read"]


def test_nothing_beside_a_transaction_needs_a_delete_or_a_ttl() -> None:
    """Key 2 missing beside T1's key 1 is fractured, unless something newer deleted it
    (before the read ended) or a write of T1's or newer there had a TTL."""
    h = Hist()
    h.txn("w:1", 10, {1: 11, 2: 12}, 0.0)
    h.read("r:1", {1: 11, 2: None}, 1.0)
    assert h.kinds() == ["fractured-read"]
    h.txn("d:1", 30, {2: None}, 0.9, f="gdel", grace=0.2)
    assert h.kinds() == []
    h = Hist()
    h.txn("w:1", 10, {1: 11, 2: 12}, 0.0, ttl=0.5)
    h.read("r:1", {1: 11, 2: None}, 0.3)
    assert h.kinds() == []


def test_a_deleted_value_that_comes_back_is_caught_but_a_late_older_write_is_not() -> None:
    """T1's key 1 read after a newer acknowledged delete is deleted data coming back; U,
    whose writer was still at work when that tombstone ran out, may re-create the key."""
    h = Hist()
    h.txn("w:1", 10, {1: 11}, 0.0)
    h.txn("d:1", 20, {1: None}, 1.0, f="gdel", grace=0.2)
    h.read("r:1", {1: 11}, 2.0)
    h.read("r:2", {1: 11}, 2.1)
    report = check_edges(h.events, LOOSE)
    assert [v.kind for v in report.violations] == ["deleted-comes-back"]
    assert "(seen by 2 reads)" in report.violations[0].message
    h = Hist()
    h.txn("w:0", 15, {1: 16}, 0.9, done=1.5)  # older than the delete, landed after 1.2
    h.txn("d:1", 20, {1: None}, 1.0, f="gdel", grace=0.2)
    h.read("r:1", {1: 16}, 2.0)
    report = check_edges(h.events, LOOSE)
    assert report.violations == [] and report.counts["late_recreated"] == 1


def test_expired_and_stale_values_are_caught() -> None:
    """A value past its own TTL, and an older value after a newer TTL write expired or a
    newer value was acknowledged: the key had moved past it."""
    h = Hist()
    h.txn("w:1", 10, {1: 11}, 0.0, ttl=0.1)
    h.read("r:1", {1: 11}, 1.0)
    assert h.kinds() == ["expired-read"]
    for ttl, kind in ((0.1, "expired-comes-back"), (None, "stale-read")):
        h = Hist()
        h.txn("w:1", 10, {1: 11}, 0.0)
        h.txn("w:2", 20, {1: 21}, 1.0, ttl=ttl)
        h.read("r:1", {1: 11}, 2.0)
        assert h.kinds() == [kind]


def test_the_raw_end_state_keeps_every_expiry() -> None:
    """A TTL write's value, or a tombstone, left without an expiry at the end."""
    h = Hist()
    h.txn("w:1", 10, {1: 11}, 0.0, ttl=60)
    h.txn("w:2", 20, {2: None}, 0.0, grace=60)
    h.read("r:1", {1: 11, 2: None}, 1.0, f="raw", tombs={"2": 20}, expiry={"1": -1, "2": -1})
    assert h.kinds() == ["lost-expiry", "lost-expiry"]


def test_an_acknowledged_transaction_stays_visible() -> None:
    """T2 was acknowledged with key 2 pending and the final read shows T1's key 2 (F3);
    a failed final read vouches for nothing, unless the rules allow it."""
    h = Hist()
    h.txn("w:1", 10, {1: 11, 2: 12}, 0.0)
    h.txn("w:2", 20, {1: 21, 2: 22}, 1.0, pending=[2])
    h.txn("w:3", 30, {1: 31}, 1.5)
    h.read("r:1", {1: 31, 2: 12}, 2.0, final=True)
    report = check_edges(h.events, DELETE_RULES)
    assert [v.kind for v in report.violations] == ["lost-acknowledged"]
    assert report.violations[0].message.endswith("(probable cause F3)")
    h = two_txns()
    h.read("r:1", {1: 21, 2: None}, 2.0, final=True, end="fail", error="MixedWritersError")
    assert h.kinds(DELETE_RULES) == ["no-final-read"] and h.kinds(REPAIR_RULES) == []


def test_group_reads_never_mix_writes() -> None:
    """A consistent group read of two transactions' values; a torn one says so itself."""
    h = two_txns()
    h.txn("w:3", 30, {3: 33}, 1.5)
    h.read("g:1", {1: 21, 3: 33}, 2.0, f="gread", consistent=True)
    h.read("g:2", {1: 21, 3: 33}, 2.0, f="gread", consistent=False)
    assert h.kinds() == ["group-mix"]


def test_phantom_aborted_and_wrong_key_values() -> None:
    """Values no write wrote, an aborted write wrote, or another key holds."""
    h = two_txns()
    h.txn("w:3", 30, {3: 33}, 1.5, end="fail")
    h.read("r:1", {1: 99, 3: 33, 4: 11}, 2.0)
    assert h.kinds() == ["aborted-read", "phantom-value", "wrong-key"]


def test_under_eviction_a_key_may_go_missing_but_never_older() -> None:
    """EVICT_RULES: nothing beside T is fine (evicted), an older value is fractured."""
    h = Hist()
    h.txn("w:1", 10, {1: 11, 2: 12}, 0.0)
    h.txn("w:2", 20, {1: 21, 2: 22}, 1.0)
    h.read("r:1", {1: 21, 2: None}, 2.0)
    assert h.kinds(EVICT_RULES) == []
    h.read("r:2", {1: 21, 2: 12}, 2.0)
    assert h.kinds(EVICT_RULES) == ["fractured-read"]


# -- one short run of each scenario ---------------------------------------------------

SHORT = Timing(duration=1.0, groups=2, pause=0.6)
EXPECTED = {
    "ramp-delete": ("faults_crash", "faults_hold", "faults_sweep", "deletes_ok", "txn_deletes",
                    "ttl_txns"),
    "ramp-lost-commit": ("faults_lost-commit", "txn_errors_OutcomeUnknownError"),
    "ramp-repair": ("faults_crash", "greads_ok"),
    "ramp-evict": ("faults_crash", "deletes_ok", "evicted_keys"),
}  # fmt: skip


@pytest.mark.parametrize("scenario", RAMP_EDGE_SCENARIOS, ids=lambda s: s.name)
async def test_one_short_run_of_each_edge_scenario(
    scenario: Any, stampede_primaries: Any, tmp_path: Path
) -> None:
    """Each scenario on primaries for 2 s injects its faults; a violation fails the test
    unless an open finding explains it, then the test is xfailed naming the findings."""
    run = await run_scenario(scenario, Env("shards", stampede_primaries), SHORT, workdir=tmp_path)
    c = run.report.counts
    assert c["writes_ok"] > 0 and c["reads_ok"] > 0 and c["raws_ok"] == 1
    assert all(c[name] > 0 for name in EXPECTED[scenario.name]), dict(c)
    assert run.history_path is not None
    text = run.history_path.with_suffix(".txt")
    if text.exists():  # the scenarios without deletes: the independent text checker too
        assert check_lines(text.read_text().splitlines()) == []
    causes = [re.search(r"\(probable cause (F\d)\)$", v.message) for v in run.report.violations]
    other = [v.message for v, m in zip(run.report.violations, causes, strict=True)
             if m is None or m.group(1) in FIXED]  # fmt: skip
    assert not other, other[:5]  # unexplained, or a regression of a fixed finding
    if run.report.violations:
        known = collections.Counter(m.group(1) for m in causes if m is not None)
        pytest.xfail(f"open stampede defects (chaos.ramp_edge_causes.FINDINGS): {dict(known)}")


# -- the defects the edge scenarios found, step by step (F1-F6 fixed in 6042e31) ------


async def _server_past(st: Stampede, key: str, at_ms: int) -> None:
    """Wait until the server's clock (the one expiry uses) is past `at_ms`: an event."""

    async def past() -> bool:
        seconds, micros = await st.topology.execute(key.encode(), "TIME")
        return int(seconds) * 1000 + int(micros) // 1000 > at_ms

    await eventually(past, within=30)


async def _old(st: Stampede, keys: Sequence[str], version: int | None = None) -> None:
    """One transaction writes b"old" at every key."""
    async with st.transaction(version=version) as tx:
        for key in keys:
            tx.set(key, b"old")


async def _stage(st: Stampede, keys: Sequence[str], version: int, value: bytes,
                 *, commit: Sequence[str]) -> str:  # fmt: skip
    """Prepare a transaction at `keys` and commit it at `commit` only (its writer died)."""
    raw = [k.encode() for k in keys]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    token = new_token()
    env = b"%d:%s:%s" % (version, token.encode(), value)
    args = [(version, token, 0, 0, env, encode_meta(raw))] * len(raw)
    prepared = await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000])
    assert prepared == [1] * len(raw)
    done = [i for i, k in enumerate(keys) if k in commit]
    if done:
        again = [(version, token, "")] * len(done)
        got = await run_units(st.topology, COMMIT, [raw[i] for i in done],
                              [sides[i] for i in done], again, head=[5000])  # fmt: skip
        assert got == [1] * len(done)
    return token


Hook = Callable[[Script, Sequence[bytes]], Awaitable[None]]


async def _nothing(script: Script, keys: Sequence[bytes]) -> None:
    return None


class Hooked(DelegatingTopology):
    """Runs `before(script, keys)` ahead of each script call and `after(script, keys)`
    once it returned (to fail it, slow it or race it)."""

    def __init__(self, inner: Any, before: Hook = _nothing, *, after: Hook = _nothing) -> None:
        super().__init__(inner)
        self.before, self.after = before, after

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        await self.before(script, keys)
        reply = await self.inner.script(script, keys, args)
        await self.after(script, keys)
        return reply


def _commits_fail_at(key: str) -> Hook:
    """A hook that fails every COMMIT call touching `key` before it runs."""

    async def fail(script: Script, keys: Sequence[bytes]) -> None:
        if script.sha == COMMIT.sha and key.encode() in keys:
            raise ShardUnavailable("connection lost (injected)", shard="test")

    return fail


@pytest.fixture
async def edge(stampede_primaries: Any) -> AsyncIterator[Stampede]:
    """A `Stampede` on primaries with a 0.05 s tombstone grace and a 0.3 s timeout."""
    opts = {"tombstone_grace": 0.05, "transaction_timeout": 0.3}
    async with open_stampede(stampede_primaries, "shards", **opts) as st:
        yield st


ONE_RETRY = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=5.0)


async def test_f1_a_group_delete_over_a_pending_transaction_stays_deleted(edge: Stampede) -> None:
    """T is committed at A and pending at B; st.delete(B) with a newer version; once its
    tombstone expires read_atomic reads B as missing and writes nothing back."""
    a, b = spread_keys(edge, "f1", 2)
    await _stage(edge, [a, b], 2000, b"T", commit=[a])
    await edge.delete(b, [b], version=3000)
    await gone(edge, b)
    assert (await edge.read_atomic([a, b])).values == {a: b"T", b: None}
    assert await raw_value(edge, b) is None


async def test_f2_a_delete_committed_after_its_tombstone_instant_deletes(edge: Stampede) -> None:
    """A tx.delete whose COMMIT lands after its tombstone's instant has a clean receipt:
    the keys must read as missing, not as the values it deleted."""
    a, b = spread_keys(edge, "f2", 2)
    await _old(edge, [a, b])

    async def slow(script: Script, keys: Sequence[bytes]) -> None:
        if script.sha == COMMIT.sha:
            await asyncio.sleep(0.2)  # the fault: the writer stalls past the 0.05 s grace

    tx = edge.transaction()
    tx._topology = Hooked(edge.topology, slow)  # noqa: SLF001 - the test swaps in a fault
    tx.delete(a)
    tx.delete(b)
    receipt = await tx.commit()
    assert receipt.pending == () and receipt.superseded == ()
    assert (await edge.read_atomic([a, b])).values == {a: None, b: None}


async def test_f3_a_pending_key_survives_its_sibling_moving_on(edge: Stampede) -> None:
    """T's commit fails at B alone (receipt pending [B]); a newer transaction writes A; the
    sweep runs: B must still show T's value."""
    a, b = spread_keys(edge, "f3", 2)
    await _old(edge, [a, b])
    tx = edge.transaction()
    tx._topology = Hooked(edge.topology, _commits_fail_at(b))  # noqa: SLF001 - a fault
    tx.set(a, b"T")
    tx.set(b, b"T")
    assert (await tx.commit()).pending == (b.encode(),)
    async with edge.transaction() as tx:
        tx.set(a, b"newer")
    await sweep_versions(edge.topology, grace=0.05)
    assert (await edge.read_atomic([a, b])).values == {a: b"newer", b: b"T"}


async def test_f4_a_version_replaced_before_the_read_is_not_returned(edge: Stampede) -> None:
    """T writes A and B; a TTL write replaces B and expires; a read of A and B needs T at
    B and a write lands on B between its rounds: B must not read as T's old value."""
    a, b = spread_keys(edge, "f4", 2)
    async with edge.transaction() as tx:
        tx.set(a, b"T")
        tx.set(b, b"T")
    async with edge.transaction(ttl=0.05) as tx:
        tx.set(b, b"short")
    await gone(edge, b)
    raced: list[bool] = []

    async def race(script: Script, keys: Sequence[bytes]) -> None:
        if script.sha == ROUND2.sha and not raced:
            raced.append(True)
            async with edge.transaction() as tx:
                tx.set(b, b"new")

    got = await read_atomic(Hooked(edge.topology, race), [a, b])
    assert raced and got.values[b] != b"T"


async def test_f5_a_late_older_write_never_fractures_a_read(edge: Stampede) -> None:
    """T (version 200) writes A and B, U (100) is prepared at B, a delete of B (300)
    commits and expires, then U's late commit arrives (it re-created B before 6042e31):
    a read of A and B must not return T at A beside U's older B."""
    a, b = spread_keys(edge, "f5", 2)
    async with edge.transaction(version=200) as tx:
        tx.set(a, b"T")
        tx.set(b, b"T")
    token = await _stage(edge, [b], 100, b"U", commit=[])
    async with edge.transaction(version=300) as tx:
        tx.delete(b)
    await gone(edge, b)
    sides = [side_key(b.encode(), edge.topology.slot_of)]
    late = [(100, token, "")]
    await run_units(edge.topology, COMMIT, [b.encode()], sides, late, head=[5000])  # U's writer
    assert (await edge.read_atomic([a, b])).values != {a: b"T", b: b"U"}


async def test_f6_a_pending_delete_that_ran_out_never_fractures_a_read(edge: Stampede) -> None:
    """T sets A and deletes B, its commit fails at B (pending), B's tombstone instant
    passes and the sweep refuses to roll T forward there: a read of A and B must not
    return T at A beside B's older value."""
    a, b = spread_keys(edge, "f6", 2)
    await _old(edge, [a, b])
    tx = edge.transaction()
    tx._topology = Hooked(edge.topology, _commits_fail_at(b))  # noqa: SLF001 - a fault
    tx.set(a, b"T")
    tx.delete(b)
    receipt = await tx.commit()
    assert receipt.pending == (b.encode(),)
    side = side_key(b.encode(), edge.topology.slot_of)
    meta = await edge.topology.execute(side, "HGET", side, b"m:" + receipt.stamp.encode())
    await _server_past(edge, b, int(meta.split(b":")[1]))  # now:at:keys; the tombstone's
    await sweep_versions(edge.topology, grace=5.0)
    assert (await edge.read_atomic([a, b])).values != {a: b"T", b: b"old"}


async def test_f7_a_repair_never_restamps_a_transaction_committed_meanwhile(edge: Stampede) -> None:
    """T1 is pending at C, a repairing group read completes it there and right then T2
    commits at C (pending at A and B): the read must not return T1 at A and B beside T2
    at C as one consistent group, restamped over T2."""
    a, b, c = spread_keys(edge, "f7", 3)
    await _old(edge, [a, b, c], version=100)
    await _stage(edge, [a, b, c], 200, b"T1", commit=[a, b])
    raced: list[bool] = []

    async def t2_commits_at_c(script: Script, keys: Sequence[bytes]) -> None:
        if script.sha == COMMIT.sha and not raced:  # the repair just completed T1 at C
            raced.append(True)
            await _stage(edge, [a, b, c], 300, b"T2", commit=[c])

    reader = Stampede(Hooked(edge.topology, after=t2_commits_at_c), options=edge.options)
    got = await reader.read("f7", [a, b, c], retry=ONE_RETRY, repair=NewestWins())
    assert raced and not (got.consistent and got.values == {a: b"T1", b: b"T1", c: b"T2"})


async def test_f8_a_ttl_write_committed_past_its_expiry_keeps_older_pending_out(
    edge: Stampede,
) -> None:
    """U (200) is committed at A and pending at B; W (300, ttl 0.05 s) writes B and C and
    its COMMIT lands after its expiry instant: B must read as missing, never as U's
    older value written back without an expiry."""
    a, b, c = spread_keys(edge, "f8", 3)
    await _old(edge, [a, b, c], version=100)
    await _stage(edge, [a, b], 200, b"U", commit=[a])

    async def slow(script: Script, keys: Sequence[bytes]) -> None:
        if script.sha == COMMIT.sha:
            await asyncio.sleep(0.2)  # the fault: W's writer stalls past its 0.05 s TTL

    tx = edge.transaction(version=300, ttl=0.05)
    tx._topology = Hooked(edge.topology, slow)  # noqa: SLF001 - the test swaps in a fault
    tx.set(b, b"W")
    tx.set(c, b"W")
    assert (await tx.commit()).pending == ()
    assert (await edge.read_atomic([a, b])).values == {a: b"U", b: None}
    assert await raw_value(edge, b) is None
