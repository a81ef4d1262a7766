"""A writer whose clock is behind by more than a write's ttl.

Its write's expiry instant (its clock plus the ttl, or the tombstone grace) is
already past by the servers' clocks: `SET ... PXAT` would delete each key as it
landed, old value and all, and the receipt said nothing. The guard refuses such a
write instead (nothing written there) and the writer raises `ClockSkewError`
(`why == "expired"`); a delete likewise, so the old values stay as they were and
no tombstone goes missing; and a `Counter` drawn for such a write is not deleted
(the next honest write would count from 1 again and be kept out by older values).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from stampede import ClockSkewError, RetryPolicy, Stampede
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.sweep import sweep
from stampede._txn.write import run_units
from stampede.keys import keyslot
from stampede.repair import Refetch
from stampede.results import GuardCode, RepairAction
from stampede.topology._guard import CROSS_SLOT_GUARD, GUARD
from stampede.wire import _record, new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import open_stampede, raw_value, spread_keys, write_newer

BEHIND_NS = 3 * 3600 * 10**9  # three hours: past a ttl plus a Counter's outlive (1 h)


class _Behind:
    """`time` as a writer whose clock is three hours behind sees it."""

    def time_ns(self) -> int:
        return time.time_ns() - BEHIND_NS


@pytest.fixture
def behind(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Calling it sets the writers' expiry clock three hours back (`expire_at`)."""
    return lambda: monkeypatch.setattr(_record, "time", _Behind())


async def test_a_write_that_would_land_expired_is_refused_and_said(
    st: Stampede, behind: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = spread_keys(st, "late")
    first = await st.write("late", dict.fromkeys(keys, b"v1"))
    behind()
    with pytest.raises(ClockSkewError, match="expiry") as caught:
        await st.write("late", dict.fromkeys(keys, b"v2"), ttl=60)
    assert caught.value.why == "expired"
    with pytest.raises(ClockSkewError, match="expiry"):
        await st.delete("late", keys)
    monkeypatch.undo()
    read = await st.read("late", keys)
    assert read.values == dict.fromkeys(keys, b"v1")  # still there, as written
    assert read.version == first.version


async def test_a_one_slot_write_that_would_land_expired_is_refused_whole(
    st: Stampede, behind: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call (keys of one slot, commit mode: the record too): all or nothing."""
    keys = ["tag:{7}:a", "tag:{7}:b"]
    await st.write("tag:{7}", dict.fromkeys(keys, b"v1"), mode="commit")
    behind()
    with pytest.raises(ClockSkewError, match="expiry"):
        await st.write("tag:{7}", dict.fromkeys(keys, b"v2"), ttl=60, mode="commit")
    monkeypatch.undo()
    read = await st.read("tag:{7}", keys, mode="commit")
    assert read.values == dict.fromkeys(keys, b"v1")


async def test_the_guard_codes_an_expired_key_and_withholds_its_siblings(
    st: Stampede,
) -> None:
    """The script itself: in one call, the write whose instant is past gets -7 at
    the key that would be written, -6 at its other keys (one holding a newer value,
    unchanged), and a batch's other write with a live expiry lands."""
    topology: Any = st.topology
    a, b, c = b"exp:{1}:a", b"exp:{1}:b", b"exp:{1}:c"
    await topology.execute(b, "SET", b, b"9:01ARZ3NDEKTSV4RRFFQ69G5FAV:x")
    past = time.time_ns() // 1_000_000 - 1000
    live = time.time_ns() // 1_000_000 + 600_000
    token = "01ARZ3NDEKTSV4RRFFQ69G5FAW"
    argv = [2, 5, token, past, 0, 0, b"5:" + token.encode() + b":p", b"5:x"]
    argv += [1, 6, token, live, 0, 0, b"6:" + token.encode() + b":q"]
    codes = await topology.script(GUARD, [a, b, c], argv)
    assert codes == [GuardCode.EXPIRED, GuardCode.WITHHELD, GuardCode.WRITTEN]
    assert await topology.execute(a, "EXISTS", a) == 0
    assert await topology.execute(b, "GET", b) == b"9:01ARZ3NDEKTSV4RRFFQ69G5FAV:x"
    assert await topology.execute(c, "GET", c) == b"6:" + token.encode() + b":q"


async def test_a_counter_drawn_for_a_write_that_would_land_expired_is_kept(
    st: Stampede, behind: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Counter's life follows the write it versions; one already past would delete
    the counter, and the next honest write would draw 1, below what is stored."""
    keys = spread_keys(st, "count")
    await st.write("count", dict.fromkeys(keys, b"v1"), versions="counter", ttl=600)
    await st.write("count", dict.fromkeys(keys, b"v2"), versions="counter", ttl=600)
    behind()
    with pytest.raises(ClockSkewError, match="expiry"):
        await st.write("count", dict.fromkeys(keys, b"v3"), versions="counter", ttl=60)
    monkeypatch.undo()
    receipt = await st.write("count", dict.fromkeys(keys, b"v4"), versions="counter", ttl=600)
    assert receipt.superseded == ()
    read = await st.read("count", keys)
    assert read.values == dict.fromkeys(keys, b"v4")


async def test_the_cross_slot_guard_refuses_an_expired_write_too(stampede_cluster: Any) -> None:
    """The cluster's guard for keys of many slots on one node (same body): a write whose
    instant is past writes none of its keys."""
    async with open_stampede(stampede_cluster, "cluster") as st:
        topology: Any = st.topology
        node = topology.shard_of(b"xs:0")
        keys = [k for k in (b"xs:%d" % i for i in range(64)) if topology.shard_of(k) == node]
        a, b = next((x, y) for x in keys for y in keys if keyslot(x) != keyslot(y))
        token = "01ARZ3NDEKTSV4RRFFQ69G5FAW"
        past = time.time_ns() // 1_000_000 - 1000
        env = b"5:" + token.encode() + b":p"
        reply = await topology.execute_on(
            node, "EVAL", CROSS_SLOT_GUARD.source, 0, 2, a, b, 5, token, past, 0, 0, env, env
        )
        assert reply == [GuardCode.EXPIRED, GuardCode.EXPIRED]
        assert await topology.execute(a, "EXISTS", a) == 0
        assert await topology.execute(b, "EXISTS", b) == 0


async def test_an_update_that_would_land_expired_is_refused(
    st: Stampede, behind: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`update()` sets its keys in MULTI/EXEC, no guard: it reads the server's clock
    under WATCH, and refuses (nothing written) when the expiry has passed."""
    keys = ["upd:{3}:a", "upd:{3}:b"]
    await st.write("upd:{3}", dict.fromkeys(keys, b"v1"))
    behind()
    with pytest.raises(ClockSkewError, match="expiry") as caught:
        await st.update("upd:{3}", keys, lambda now: dict.fromkeys(keys, b"v2"), ttl=60)
    assert caught.value.why == "expired"
    monkeypatch.undo()
    read = await st.read("upd:{3}", keys)
    assert read.values == dict.fromkeys(keys, b"v1")


async def test_an_older_transaction_never_completes_over_one_that_landed_expired(
    quick: Stampede, behind: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction T draws its stamp; a newer transaction, from a writer whose clock
    is behind by more than its ttl, commits at a already expired (the commit reports
    it gone and deletes what a held); T then prepares at a and b (a holds nothing
    newer by then), commits at b, and its writer dies before its commit reaches a.
    Neither a reader nor the sweep may complete T at a: an older write would come
    back after a newer one was acknowledged. (Before, only a value that was current
    at a, or the floor a group write raises, kept T out.)"""
    st = quick
    a, b = spread_keys(st, "txgone", 2)
    raw = [a.encode(), b.encode()]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    behind()
    async with st.transaction(ttl=60) as tx:
        tx.set(a, b"newer")
    monkeypatch.undo()
    assert await raw_value(st, a) is None  # landed expired: gone at once
    env = b"%d:%s:old" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None, "an older version came back over a newer write"


async def test_a_repair_delete_from_a_clock_behind_still_lands_its_tombstones(
    st: Stampede, behind: Any
) -> None:
    """A repair's delete (the source says the entity is gone) lands tombstones that
    keep late older writes out for the grace window. Their expiry comes from the
    server's clock: from a worker clock behind by more than the grace they landed
    already expired (the keys simply deleted, nothing kept out)."""
    keys = spread_keys(st, "rgone", 2)
    await st.write("rgone", dict.fromkeys(keys, b"old"), mode="commit")
    version, _ = await write_newer(st, [keys[0].encode()], b"new")  # torn
    st.versions.observe(version)

    async def gone(group: bytes, keys: Sequence[bytes]) -> None:
        return None

    behind()
    quick = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
    result = await st.read("rgone", keys, mode="commit", retry=quick, repair=Refetch(gone))
    assert result.repair is not None and result.repair.action is RepairAction.DELETED
    assert result.repair.stamp is not None
    tombstone = b"%d:%s" % (result.repair.stamp[0], result.repair.stamp[1].encode())
    assert [await raw_value(st, k) for k in keys] == [tombstone, tombstone]


async def test_a_refetch_over_a_delete_from_a_clock_behind_restores_live_data(
    topology_env: tuple[str, Any], behind: Any
) -> None:
    """A `Refetch` over a delete (the source says the entity exists) writes new data,
    which lives the options' ttl: counted from the server's clock, as a repair's
    tombstones' grace is. From a worker clock behind by more than the ttl it used to
    land already expired (the compare-and-set's past PXAT deletes the key): the keys,
    tombstones and all, simply went, and the repair still said `rewritten`."""
    kind, env = topology_env
    async with open_stampede(env, kind, ttl=3600) as st:
        keys = spread_keys(st, "rback", 2)
        await st.write("rback", dict.fromkeys(keys, b"x"))
        await st.delete("rback", keys[:1], grace=30)  # torn: the delete reached one key

        async def load(group: bytes, names: Sequence[bytes]) -> dict[bytes, bytes]:
            return dict.fromkeys(names, b"from-db")

        behind()
        quick = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
        result = await st.read("rback", keys, retry=quick, repair=Refetch(load))
        assert result.repair is not None and result.repair.action is RepairAction.REWRITTEN
        assert result.repair.stamp is not None
        stamp = b"%d:%s:" % (result.repair.stamp[0], result.repair.stamp[1].encode())
        assert [await raw_value(st, k) for k in keys] == [stamp + b"from-db"] * 2
        for key in keys:
            left = int(await st.topology.execute(key.encode(), "PTTL", key))
            assert left > 3_000_000, key  # the ttl (an hour), by the server's clock
