"""Edges between the mechanisms: group writes, deletes, repairs and transactions
meeting at one key in either order. Each test failed before its fix; every one runs
on both topologies."""

from __future__ import annotations

from typing import Any

import pytest

from stampede import InvalidKeyError, RetryPolicy, Stampede, StampedeError, TornReadError
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.sweep import sweep
from stampede._txn.write import run_units
from stampede.topology._guard import KEEP_MS
from stampede.typing import GuardStamp
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import gone, raw_value, spread_keys


@pytest.mark.parametrize("how", ["st.delete", "ttl", "tx ttl"])
@pytest.mark.parametrize("then", ["read", "sweep"])
async def test_a_prepare_landing_under_a_newer_write_is_never_completed_later(
    quick: Stampede, how: str, then: str
) -> None:
    """T draws its stamp; a newer group delete (or TTL'd write, or TTL'd transaction)
    lands at a before T's prepare gets there; T commits at b, its writer dies before
    its commit reaches a. Once the newer write at a is gone (tombstone or TTL run
    out), neither a reader nor the sweep may complete T at a: T is older than what
    a held when T was prepared there, so a reads as missing, never as T's value."""
    st = quick
    a, b = spread_keys(st, f"under-{how.replace(' ', '')}-{then}", 2)
    raw = [a.encode(), b.encode()]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    if how == "st.delete":
        await st.delete(a, [a])
    elif how == "ttl":
        await st.write(a, {a: b"newer"}, ttl=0.05)
    else:
        async with st.transaction(ttl=0.05) as tx:
            tx.set(a, b"newer")
    env = b"%d:%s:old" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]
    await gone(st, a)
    if then == "sweep":
        await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None, "an older version came back over a newer write"
    await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None


@pytest.mark.parametrize("how", ["tx.delete", "tx.set"])
async def test_a_group_read_never_returns_a_kept_version_under_a_transaction(
    st: Stampede, how: str
) -> None:
    """A group {a, b} written whole (w1); a newer group write w2 in flight (at a, not
    yet at b: a keeps w1 for group reads); then a transaction, acknowledged, deletes
    or rewrites a. A group read begun after it must not return w1 as the group's
    last whole state: a's w1 was replaced by an acknowledged write older than the
    read (deleted data would come back). It reads torn instead."""
    a, b = spread_keys(st, f"keptx-{how}", 2)
    group = f"keptx-{how}"
    await st.write(group, {a: b"w1", b: b"w1"})
    # w2 landed at a only (in flight): a keeps w1
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    value = b"%d:%s:w2" % (version, token.encode())
    stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": KEEP_MS}
    await st.topology.write_guarded([a.encode()], [value], **stamp)
    async with st.transaction() as tx:
        if how == "tx.delete":
            tx.delete(a)
        else:
            tx.set(a, b"t")
    quick = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=5.0)
    with pytest.raises(TornReadError):  # never w1 as a whole group
        await st.read(group, [a, b], retry=quick)


def _other_shard(st: Stampede, key: str, prefix: str) -> str:
    """A key on another shard than `key`."""
    here = st.topology.shard_of(key.encode())
    return next(
        k for k in (f"{prefix}:{i}" for i in range(256)) if st.topology.shard_of(k.encode()) != here
    )


async def test_an_update_over_a_pending_transaction_is_never_undone(st: Stampede) -> None:
    """A transaction over a and b, committed at b and still pending at a (its writer
    died); then update() rewrites a, newer, with a TTL. Once that value expires,
    neither a reader nor the sweep completes the older transaction at a: update()
    raises a's floor as every other write that is no transaction's does."""
    a = "upd:{1}:a"
    b = _other_shard(st, a, "upd:b")
    raw = [a.encode(), b.encode()]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    env = b"%d:%s:old" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]
    receipt = await st.update("upd:{1}", [a], lambda cur: {a: b"updated"}, ttl=0.05)
    assert (receipt.version, receipt.token) > (version, token)
    await gone(st, a)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None, "an older version came back over an update"
    await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None


async def test_an_update_never_replaces_a_value_of_another_type(st: Stampede) -> None:
    """A key of the group holds another program's list: update() refuses it
    (InvalidKeyError, nothing written), as a group write and a transaction do,
    instead of reading it as missing and replacing the list with its SET."""
    a, b = "updtype:{1}:a", "updtype:{1}:b"
    await st.topology.execute(a.encode(), "RPUSH", a, b"theirs")
    with pytest.raises(InvalidKeyError, match="WRONGTYPE"):
        await st.update("updtype:{1}", [a, b], lambda cur: {a: b"x", b: b"x"})
    assert await st.topology.execute(a.encode(), "LRANGE", a, 0, -1) == [b"theirs"]
    assert await raw_value(st, b) is None


@pytest.mark.parametrize("returned", ["none", "extra"])
async def test_an_update_function_returning_what_cannot_be_written_is_refused(
    st: Stampede, returned: str
) -> None:
    """fn returning None (not a mapping), or a value for a key it was not given (which
    was silently dropped: the caller believed it written), is bad input: a
    StampedeError, nothing written."""
    a, other = "updret:{1}:a", "updret:{1}:zz"

    def fn(cur: dict[str, bytes | None]) -> Any:
        return None if returned == "none" else {a: b"1", other: b"2"}

    with pytest.raises(StampedeError, match="nothing was written"):
        await st.update("updret:{1}", [a], fn)
    assert await raw_value(st, a) is None and await raw_value(st, other) is None


async def test_a_transaction_over_an_evicted_value_still_drops_the_kept_list(
    st: Stampede,
) -> None:
    """As above, but a's value was evicted (gone under `maxmemory`, here a raw DEL)
    before the transaction deleted a: its commit replaces nothing at a, yet a's kept
    list (w1) must go too, or a group read returns w1, which the acknowledged
    delete replaced, as the group's last whole state."""
    a, b = spread_keys(st, "keptev", 2)
    await st.write("keptev", {a: b"w1", b: b"w1"})
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    value = b"%d:%s:w2" % (version, token.encode())
    stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": KEEP_MS}
    await st.topology.write_guarded([a.encode()], [value], **stamp)
    await st.topology.execute(a.encode(), "DEL", a.encode())  # evicted
    async with st.transaction() as tx:
        tx.delete(a)
    quick = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=5.0)
    with pytest.raises(TornReadError):  # never w1 as a whole group
        await st.read("keptev", [a, b], retry=quick)
