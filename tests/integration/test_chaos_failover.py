"""The failover chaos scenarios: each runs once, short, with no violation; the failover
checker catches what is planted in doctored histories; and the defects the scenarios
found, reproduced without a failover (regression tests: both failed before the fix)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import stampede
from chaos.failover_checker import check_failover
from chaos.failover_env import ReplicatedCluster, SentinelPrimaries
from chaos.failover_scenarios import FAILOVER_SCENARIOS, FailoverTiming, run_failover
from stampede import Durability, StampedeError
from stampede.keys import keyslot
from stampede.options import ConnectOptions
from stampede.testing import LocalCluster, RedisNode

from ..support import caught_up

pytestmark = pytest.mark.timeout(240)  # real elections, on a machine that may be busy

SHORT = FailoverTiming(groups=8, warm=20, tail=30)
BY_NAME = {s.name: s for s in FAILOVER_SCENARIOS}
KNOWN_DEFECTS: set[str] = set()


@pytest.fixture(scope="module")
def cluster() -> Iterator[ReplicatedCluster]:
    with ReplicatedCluster() as servers:
        yield servers


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelPrimaries]:
    with SentinelPrimaries() as servers:
        yield servers


def _assert_clean(run: Any) -> None:
    wrong = [v for v in run.report.violations if v.kind not in KNOWN_DEFECTS]
    assert not wrong, [f"{v.kind}: {v.message}" for v in wrong[:5]]
    assert not run.torn_at_end
    (figures,) = run.report.figures
    assert figures.promoted is not None and figures.first_write is not None
    assert run.report.counts["writes_ok"] and run.report.counts["txn_ok"]
    assert run.report.counts["durable_yes"] and run.report.counts["rread_ok"]


@pytest.mark.parametrize("name", ["failover-graceful", "failover-kill", "failover-stop"])
async def test_a_cluster_failover_breaks_no_promise(
    name: str, cluster: ReplicatedCluster, tmp_path: Path
) -> None:
    """Graceful, kill, stop: the replica is promoted, writes resume on the shard, and the
    history holds no torn read reported whole, no fractured read, no lost durable write
    (and, after a graceful failover, no lost write at all)."""
    run = await run_failover(BY_NAME[name], cluster, SHORT, workdir=tmp_path)
    _assert_clean(run)
    if name == "failover-graceful":
        assert not run.report.lost_to_fault


async def test_a_sentinel_failover_breaks_no_promise(
    sentinels: SentinelPrimaries, tmp_path: Path
) -> None:
    """A Sentinel-managed primary killed: the client follows the promotion."""
    run = await run_failover(BY_NAME["sentinel-kill"], sentinels, SHORT, workdir=tmp_path)
    _assert_clean(run)


# -- the checker on doctored histories -------------------------------------------------------


def _op(t: float, op: str, invoke: dict[str, Any], done: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"t": t, "type": "invoke", "op": op, **invoke},
        {"t": t + 0.01, "op": op, **done},
    ]


def _write(t: float, op: str, wid: str, version: int, **extra: Any) -> list[dict[str, Any]]:
    values = {k: f"{wid}:{k}" for k in ("g:a", "g:b")}
    invoke: dict[str, Any] = {
        "f": "write",
        "proc": wid.split(":")[0],
        "group": "g",
        "mode": "stamp",
    }
    invoke |= {"keys": list(values), "values": values, "counter": False, "ttl": None}
    done = {"type": "ok", "f": "write", "version": version, "token": "T", "superseded": []}
    return _op(t, op, invoke, done | extra)


def _read(t: float, op: str, values: dict[str, str], version: int) -> list[dict[str, Any]]:
    invoke = {"f": "read", "group": "g", "mode": "stamp", "keys": list(values), "final": True}
    done = {"type": "ok", "f": "read", "status": "consistent", "values": values}
    return _op(t, op, invoke, done | {"version": version, "token": "T", "final": True})


def _loss(t: float, keys: list[str]) -> list[dict[str, Any]]:
    fault = {"t": t, "type": "fault", "shard": "s1", "keys": keys}
    return [{**fault, "op": "f1", "kind": "failover-kill"}, {**fault, "op": "f2", "kind": "loss"}]


def test_the_checker_passes_a_clean_history() -> None:
    events = [
        *_write(1, "w:0", "w:1", 10),
        *_read(2, "r:0", {"g:a": "w:1:g:a", "g:b": "w:1:g:b"}, 10),
    ]
    assert check_failover(events).ok


def test_the_checker_catches_a_mixed_read() -> None:
    """A group read reported whole with values of two writes."""
    events = [*_write(1, "w:0", "w:1", 10), *_write(1.1, "w:1", "w:2", 11)]
    events += _read(2, "r:0", {"g:a": "w:1:g:a", "g:b": "w:2:g:b"}, 11)
    assert "mixed-read" in check_failover(events).by_kind()


def test_the_checker_catches_a_lost_durable_write_but_excuses_a_plain_one() -> None:
    """After a loss, the group reads an older write: a plain write at risk is lost to the
    fault; a write acknowledged durable is a violation."""
    base = [*_write(1, "w:0", "w:1", 10), *_write(2, "w:1", "w:2", 11), *_loss(3, ["g:a", "g:b"])]
    base += _read(4, "r:0", {"g:a": "w:1:g:a", "g:b": "w:1:g:b"}, 10)
    plain = check_failover(base)
    assert plain.ok and [lost.write for lost in plain.lost_to_fault] == ["w:2"]
    durable = {"t": 2.02, "type": "durable", "op": "durable:w:2", "write": "w:2", "durable": True}
    assert "lost-durable-write" in check_failover([*base, durable]).by_kind()


def _txn(t: float, op: str, version: int, writes: dict[str, int]) -> list[dict[str, Any]]:
    invoke = {"f": "txn", "session": 1, "txn": version, "version": version, "writes": writes}
    return _op(t, op, invoke, {"type": "ok", "f": "txn", "token": "T"})


def _rread(t: float, op: str, values: dict[str, int | None]) -> list[dict[str, Any]]:
    invoke = {"f": "rread", "session": 1001, "txn": 1, "keys": [int(k) for k in values]}
    return _op(t, op, invoke, {"type": "ok", "f": "rread", "values": values, "rounds": 1})


def test_the_checker_excuses_a_lost_key_read_as_missing_only() -> None:
    """A transaction's key lost in the failover reads as missing (documented); read as
    an older transaction's value, or missing without a loss, it is a fractured read."""
    txns = [
        *_txn(1, "t:0", 1, {"1": 1000001, "2": 1000002}),
        *_txn(2, "t:1", 2, {"1": 1000003, "2": 1000004}),
    ]
    missing = _rread(4, "a:0", {"1": 1000003, "2": None})
    older = _rread(4, "a:0", {"1": 1000003, "2": 1000002})
    lost = _loss(3, ["ramp:2"])
    assert check_failover([*txns, *lost, *missing]).ok
    assert "fractured-read" in check_failover([*txns, *missing]).by_kind()
    assert "fractured-read" in check_failover([*txns, *lost, *older]).by_kind()


def test_the_checker_catches_a_lost_durable_transaction_but_excuses_a_plain_one() -> None:
    """After a loss, the final read_atomic returns an older transaction's value at a key:
    a plain transaction is lost to the fault; one acknowledged durable is a violation,
    unless that key was left pending (its commit was not acknowledged)."""
    base = [
        *_txn(1, "t:0", 1, {"1": 1000001, "2": 1000002}),
        *_txn(2, "t:1", 2, {"1": 1000003, "2": 1000004}),
        *_loss(3, ["ramp:1", "ramp:2"]),
    ]
    final = _rread(4, "a:0", {"1": 1000001, "2": 1000002})
    final[0]["final"] = True
    assert check_failover([*base, *final]).ok
    acked = ("ok", "t:1")
    durable = [{**e, "durable": True} if (e["type"], e["op"]) == acked else e for e in base]
    assert "lost-durable-txn" in check_failover([*durable, *final]).by_kind()
    pending = [{**e, "pending": ["ramp:1", "ramp:2"]} if e["op"] == "t:1" else e for e in durable]
    assert check_failover([*pending, *final]).ok


def test_the_checker_flags_an_error_outside_the_stampede_tree() -> None:
    invoke = {"f": "write", "group": "g", "mode": "stamp", "keys": ["g:a"], "values": {}}
    events = _op(1, "w:0", invoke, {"type": "unknown", "f": "write", "error": "ValueError"})
    assert "foreign-error" in check_failover(events).by_kind()


# -- defects the failover scenarios found ------------------------------------------------------


@pytest.fixture
async def holed() -> AsyncIterator[tuple[stampede.Stampede, str]]:
    """A client whose slot map then loses the owner of a group's slot (every node
    DELSLOTS it), as maps loaded mid-failover were seen to."""
    with LocalCluster(3, 0, extra_args=["--cluster-require-full-coverage", "no"]) as servers:
        options = ConnectOptions(socket_timeout=0.5, connect_timeout=0.5, failover_timeout=0.3)
        async with stampede.connect(servers.url, cluster=True, connection=options) as st:
            key = "hole:{1}:a"
            await st.write("hole:{1}", {key: b"v"})
            for node in servers.nodes:
                node.client().execute_command("CLUSTER", "DELSLOTS", keyslot(key))  # type: ignore[no-untyped-call]
            yield st, key


async def test_a_slot_without_owner_raises_a_stampede_error(
    holed: tuple[stampede.Stampede, str],
) -> None:
    """Seen in failover-kill: writes raised ValueError (`lane_at('cluster')`) and
    SlotsUnknown (a RedisError) instead of a StampedeError."""
    st, key = holed
    raised: list[BaseException] = []
    for _ in range(2):
        try:
            await st.write("hole:{1}", {key: b"w"})
        except Exception as exc:
            raised.append(exc)
    assert raised and all(isinstance(e, StampedeError) for e in raised), raised


async def test_a_durability_shortfall_longer_than_the_socket_timeout_is_reported() -> None:
    """docs/operations.md: "A shortfall is reported, not raised". With
    `Durability(timeout=1.0)` over `socket_timeout=0.5` and the replica stopped, the
    write raises `WriteTimeout` (outcome unknown) after 0.5 s."""
    primary = RedisNode()
    primary.start()
    replica = RedisNode(extra_args=["--replicaof", primary.host, str(primary.port)])
    replica.start()
    try:
        caught_up(primary)
        options = ConnectOptions(socket_timeout=0.5, connect_timeout=0.5, connection_retries=1)
        async with stampede.connect([primary.url], connection=options) as st:
            replica.pause()
            receipt = await st.write(
                "d:{1}", {"d:{1}:a": b"1"}, durability=Durability(replicas=1, timeout=1.0)
            )
            assert receipt.durable is False
    finally:
        replica.stop()
        primary.stop()
