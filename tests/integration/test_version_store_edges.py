"""The version store (version hashes, their index, commit marks and expiry) at the
edges between its mechanisms: a commit meeting a transaction still pending at the
same key, expiry meeting a prepare, hashes of another shape. Each test failed
before the fix it names; every one runs on both topologies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from stampede import Envelope, Stampede
from stampede._lua import Script
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.sweep import sweep
from stampede._txn.write import run_units
from stampede.errors import ShardUnavailable
from stampede.testing.faults import DelegatingTopology
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, mark_record, side_key

from ..support import eventually, gone, raw_value, spread_keys


async def _server_ms(st: Stampede, key: str) -> int:
    seconds, micros = await st.topology.execute(key.encode(), "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def _prepare(
    st: Stampede, keys: list[str], siblings: list[str], version: int, token: str, *, at: int = 0
) -> None:
    raw = [k.encode() for k in keys]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:%s" % (version, token.encode(), token.encode())
    meta = encode_meta([k.encode() for k in siblings])
    args = [(version, token, 0, at, env, meta)] * len(raw)
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1] * len(
        raw
    )


async def _commit(st: Stampede, keys: list[str], version: int, token: str, grace: int) -> Any:
    raw = [k.encode() for k in keys]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    args = [(version, token, "")] * len(raw)
    return await run_units(st.topology, COMMIT, raw, sides, args, head=[grace])


async def test_an_expiring_commit_keeps_the_hash_of_a_newer_pending_transaction(
    st: Stampede,
) -> None:
    """a and b hold a value with no TTL (a's version hash has none either). T3 is
    prepared at both and committed at b only (its writer died). An older transaction
    T2 with a short TTL then commits at a: its commit must not cut a's version hash
    down to T2's expiry plus the grace window, or T3's prepared version at a goes
    with it and T3 (visible at b) is lost at a: a fractured read."""
    a, b = spread_keys(st, "hx", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    v2, t2 = st.versions.now(), new_token()  # type: ignore[attr-defined]
    v3, t3 = st.versions.now(), new_token()  # type: ignore[attr-defined]
    assert v3 > v2
    await _prepare(st, [a, b], [a, b], v3, t3)
    assert await _commit(st, [b], v3, t3, 5000) == [1]
    at = await _server_ms(st, a) + 50
    await _prepare(st, [a], [a], v2, t2, at=at)
    assert await _commit(st, [a], v2, t2, 50) == [1]  # T2 is newer than a's value
    await gone(st, a)

    async def past() -> bool:  # past T2's expiry plus the grace window it was given
        return await _server_ms(st, a) > at + 50 + 20

    await eventually(past)
    got = await st.read_atomic([a, b])
    assert got.values == {a: t3.encode(), b: t3.encode()}
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token) == (v3, t3)


async def _swept_past(st: Stampede, a: str, expiry: int, stamp: tuple[int, str]) -> None:
    """Once the server's clock at `a` is past `expiry` (a sibling's value expiry plus
    the grace window it was given), a sweep completes the transaction `stamp` at `a`."""

    async def past() -> bool:
        return await _server_ms(st, a) > expiry + 20

    await eventually(past)
    await sweep(st.topology, grace=0.05)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token) == stamp


def _in_sweep_order(st: Stampede, keys: list[str]) -> list[str]:
    """`keys` in the order the sweep visits their shards."""
    names = list(st.topology.shard_names)
    return sorted(keys, key=lambda k: names.index(st.topology.shard_of(k.encode())))


async def test_a_sibling_group_deleted_keeps_its_commit_marks_for_the_sweep(
    st: Stampede,
) -> None:
    """T committed at b, still pending at a (its commit there was not acknowledged: the
    receipt lists a as pending). b is then deleted by a group delete. The sweep visits
    b's version hash first: it must not delete it (and the commit marks that vouch for
    T) before it has rolled T forward at a, or T is never completed there."""
    b, a = _in_sweep_order(st, spread_keys(st, "gdm", 2))
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a, b], [a, b], version, token)
    assert await _commit(st, [b], version, token, 5000) == [1]
    await st.delete(b, [b])
    await sweep(st.topology)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token) == (version, token)
    assert (await st.read_atomic([a, b])).values == {a: token.encode(), b: None}


@pytest.mark.parametrize("legacy", [False, True], ids=["marks", "legacy-marks"])
async def test_a_sibling_rewritten_with_a_ttl_keeps_its_commit_marks_for_the_sweep(
    st: Stampede, legacy: bool
) -> None:
    """T (no TTL) committed at b, still pending at a. b is then rewritten by a
    transaction U with a short TTL, which gives b's version hash (until then without
    expiry) one: it must keep the commit marks that vouch for T past U's expiry plus
    the grace window, or the sweep that comes later never completes T at a. The same
    for a hash whose marks are in the form written before they moved to `t` (`c`)."""
    a, b = spread_keys(st, "ttm-legacy" if legacy else "ttm", 2)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a, b], [a, b], version, token)
    assert await _commit(st, [b], version, token, 5000) == [1]
    if legacy:  # T's mark as an older stampede wrote it
        side = side_key(b.encode(), st.topology.slot_of)
        await st.topology.execute(side, "HDEL", side, "t")
        await st.topology.execute(side, "HSET", side, "c", mark_record((version, token)))
    v2, t2 = st.versions.now(), new_token()  # type: ignore[attr-defined]
    at = await _server_ms(st, b) + 50
    await _prepare(st, [b], [b], v2, t2, at=at)
    assert await _commit(st, [b], v2, t2, 50) == [1]
    await gone(st, b)
    await _swept_past(st, a, at + 50, (version, token))


class ShardDown(DelegatingTopology):
    """Every call bound for `down` fails as a lost connection does."""

    def __init__(self, inner: Any, down: str) -> None:
        super().__init__(inner)
        self.down = down

    def _check(self, shard: str) -> None:
        if shard == self.down:
            raise ShardUnavailable("shard down (injected)", shard=shard)

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        for key in keys:
            self._check(self.inner.shard_of(key))
        return await self.inner.fetch(keys)

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        self._check(self.inner.shard_of(key))
        return await self.inner.execute(key, *args, resend=resend)

    async def execute_on(self, shard: str, *args: Any) -> Any:
        self._check(shard)
        return await self.inner.execute_on(shard, *args)

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        self._check(self.inner.shard_of(keys[0]))
        return await self.inner.script(script, keys, args)


async def test_a_sweep_that_fails_half_way_leaves_the_commit_marks_it_needs(
    st: Stampede,
) -> None:
    """T (no TTL) committed at b, still pending at a, whose shard is down (why its
    commit there failed). b is rewritten by U with a short TTL. A sweep runs while a's
    shard is down: it visits b's shard, then fails at a's. It must not have cut b's
    version hash down to U's expiry on the way, or once a's shard is back (after
    U's expiry plus the grace window) the next sweep finds no evidence of T."""
    b, a = _in_sweep_order(st, spread_keys(st, "half", 2))
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a, b], [a, b], version, token)
    assert await _commit(st, [b], version, token, 5000) == [1]
    v2, t2 = st.versions.now(), new_token()  # type: ignore[attr-defined]
    at = await _server_ms(st, b) + 1000
    await _prepare(st, [b], [b], v2, t2, at=at)
    assert await _commit(st, [b], v2, t2, 50) == [1]
    with pytest.raises(ShardUnavailable):
        await sweep(ShardDown(st.topology, st.topology.shard_of(a.encode())), grace=0.05)
    assert await raw_value(st, b) is not None  # (the sweep met U still there)
    await gone(st, b)
    await _swept_past(st, a, at + 50, (version, token))


async def test_a_superseded_version_dropped_past_eight_never_comes_back(st: Stampede) -> None:
    """An older transaction prepared at a, then ten newer commits there (the last with
    a short TTL): the older version, marked superseded and then dropped past eight
    marked, has no fields left; once the newest value has expired its late commit
    writes nothing, and a reader of a beside its sibling reads a as missing."""
    a, b = spread_keys(st, "drop8", 2)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a, b], [a, b], version, token)
    assert await _commit(st, [b], version, token, 5000) == [1]
    for n in range(9):
        async with st.transaction() as tx:
            tx.set(a, b"%d" % n)
    async with st.transaction(ttl=0.05) as tx:
        tx.set(a, b"short")
    side = side_key(a.encode(), st.topology.slot_of)
    stamp = b"%d:%s" % (version, token.encode())
    fields = await st.topology.execute(side, "HMGET", side, b"d:" + stamp, b"x:" + stamp)
    assert fields == [None, None]
    await gone(st, a)
    assert (await _commit(st, [a], version, token, 5000))[0] in (-5, 0, 2)
    assert await raw_value(st, a) is None
    assert (await st.read_atomic([a, b])).values == {a: None, b: token.encode()}


async def test_a_prepare_resent_over_its_superseded_version_keeps_the_index(
    st: Stampede,
) -> None:
    """A prepare that arrives again once its version was kept out at the key (a lost
    reply resent late): the version stays marked, in the index too, and its commit is
    still kept out."""
    a = "resend:{1}:a"
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a], [a, "resend:{2}:b"], version, token)
    async with st.transaction() as tx:
        tx.set(a, b"newer")
    await _prepare(st, [a], [a, "resend:{2}:b"], version, token)
    side = side_key(a.encode(), st.topology.slot_of)
    p, i = await st.topology.execute(side, "HMGET", side, "p", "i")
    pad = b"%020d:%s" % (version, token.encode())
    assert pad not in p and pad in i
    assert await _commit(st, [a], version, token, 5000) == [0]
    assert (await raw_value(st, a) or b"").endswith(b":newer")


async def test_a_late_commit_whose_version_was_collected_reports_superseded(
    st: Stampede,
) -> None:
    """An older transaction prepared at a and committed at b only; ten newer
    transactions then commit at a, so its version there is marked and dropped past
    eight. Its late commit at a writes nothing and says so: superseded (0), as a
    commit that still found its version does, not "already current" (2), which would
    leave a out of the receipt's `superseded`. Its commit at b, resent, is still 2."""
    a, b = spread_keys(st, "late0", 2)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    await _prepare(st, [a, b], [a, b], version, token)
    assert await _commit(st, [b], version, token, 5000) == [1]
    for n in range(10):
        async with st.transaction() as tx:
            tx.set(a, b"%d" % n)
    side = side_key(a.encode(), st.topology.slot_of)
    stamp = b"%d:%s" % (version, token.encode())
    assert await st.topology.execute(side, "HMGET", side, b"d:" + stamp) == [None]
    assert await _commit(st, [a], version, token, 5000) == [0]
    assert (await raw_value(st, a) or b"").endswith(b":9")
    assert await _commit(st, [b], version, token, 5000) == [2]
