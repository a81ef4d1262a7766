"""The guarantees under races: repairs against late writes, versions from the source of
truth, deletes and expiry against delayed writes, TTLs kept, clock poisoning, sequential
writers, unorderable versions and bad input. Real servers, both topologies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Unpack

import pytest

from stampede import (
    ClockSkewError,
    Counter,
    Envelope,
    HybridClock,
    InvalidKeyError,
    InvalidValueError,
    Mode,
    OrderingError,
    RetryPolicy,
    Stampede,
    Status,
    TornReadError,
)
from stampede import _pipeline as pipeline
from stampede._kept import drop_kept
from stampede._write import write_group
from stampede.errors import ConfigurationError, RepairError
from stampede.repair import Loaded, NewestWins, Refetch
from stampede.results import RepairAction
from stampede.testing.faults import DelegatingTopology
from stampede.topology._base import WriteOutcome
from stampede.typing import GuardStamp, RepairContext, Topology
from stampede.verdict import judge
from stampede.wire import commit_key, new_token

from ..support import gone, open_stampede, spread_keys, without_expiry

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
YEAR_MS = 365 * 24 * 3600 * 1000


async def land(
    st: Stampede,
    keys: Sequence[str],
    payload: bytes,
    stamp: tuple[int, str],
    *,
    expire_at_ms: int | None = None,
) -> list[int]:
    """One writer's part of a write reaching Redis: `keys` only, under `stamp`.

    This is what a writer that dies (or stalls) part way leaves behind, and what its
    delayed or retried remainder sends later: the same stamp, the same bytes.
    """
    version, token = stamp
    raw = [k.encode() for k in keys]
    out = await st.topology.write_guarded(
        raw,
        [Envelope(version, token, payload).encode()] * len(raw),
        version=version,
        token=token,
        expire_at_ms=expire_at_ms,
    )
    assert out.ok
    await drop_kept(st.topology, raw)  # as if it happened longer ago than the grace window
    return [out.results[k] for k in raw]


async def raw_get(st: Stampede, key: str) -> bytes | None:
    value: bytes | None = await st.topology.execute(key.encode(), "GET", key)
    return value


def stamp_of(st: Stampede) -> tuple[int, str]:
    version = st.versions.now() if isinstance(st.versions, HybridClock) else 1
    return version, new_token()


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_refetch_then_late_write_never_mixes(st: Stampede, mode: Mode) -> None:
    """Writer W lands key A only; a Refetch repair rewrites the group from the source;
    W's delayed (or retried) write of B then arrives with W's stamp. It is kept out:
    the group still reads whole from the source, never A from the source and B from W."""
    a, b = spread_keys(st, "late", 2)
    await st.write("late", {a: b"old", b: b"old"}, mode=mode)
    w = stamp_of(st)
    await land(st, [a], b"w", w)

    async def loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        return dict.fromkeys(keys, b"source")

    result = await st.read("late", [a, b], mode=mode, retry=QUICK, repair=Refetch(loader))
    assert result.repaired and result.values == {a: b"source", b: b"source"}
    assert result.token != w[1] and result.version == w[0]
    assert await land(st, [b], b"w", w) == [0]  # W's late half: kept out by the repair
    if mode is Mode.COMMIT:  # W's late commit record too
        ckey = commit_key(b"late")
        late = await st.topology.write_guarded(
            [ckey], [Envelope(w[0], w[1], b"[]").encode()], version=w[0], token=w[1]
        )
        assert late.results[ckey] == 0
    again = await st.read("late", [a, b], mode=mode)
    assert again.consistent and again.values == {a: b"source", b: b"source"}


async def test_two_repairs_never_share_a_stamp(st: Stampede) -> None:
    """Repairs of one torn state get different tokens, so halves of two repairs that
    interleave across shards read torn, never whole."""
    a, b = spread_keys(st, "twice", 2)
    await st.write("twice", {a: b"old", b: b"old"})
    await land(st, [a], b"w", stamp_of(st))
    seen = await st.topology.fetch([a.encode(), b.encode()])
    from stampede.repair._base import repair_stamp
    from stampede.verdict import Observation

    obs = Observation(b"twice", (a.encode(), b.encode()), tuple(seen))
    first, second = repair_stamp(obs), repair_stamp(obs)
    assert first[0] == second[0] and first[1] != second[1]


async def test_newest_wins_then_late_write_is_kept_out(st: Stampede) -> None:
    """NewestWins without rebuild makes the last writer per key consistent under its own
    stamp; the torn write's late half cannot then reach the group."""
    a, b = spread_keys(st, "nwl", 2)
    await st.write("nwl", {a: b"old", b: b"old"})
    w = stamp_of(st)
    await land(st, [a], b"w", w)
    result = await st.read("nwl", [a, b], retry=QUICK, repair=NewestWins())
    assert result.repaired and result.values == {a: b"w", b: b"old"}
    assert await land(st, [b], b"w", w) == [0]
    again = await st.read("nwl", [a, b])
    assert again.consistent and again.values == {a: b"w", b: b"old"}


async def test_application_versions_order_the_cache(st: Stampede) -> None:
    """A write carrying the database's version 5 is not replaced by a slow writer that
    carries version 3, whichever reaches Redis last."""
    keys = spread_keys(st, "dbv", 2)
    newer = await st.write("dbv", dict.fromkeys(keys, b"row v5"), version=5)
    slow = await st.write("dbv", dict.fromkeys(keys, b"row v3"), version=3)
    assert slow.superseded == tuple(k.encode() for k in keys)
    result = await st.read("dbv", keys)
    assert result.version == 5 and result.token == newer.token
    assert set(result.values.values()) == {b"row v5"}


async def test_refetch_orders_by_the_source_version(st: Stampede) -> None:
    """A loader that returns `Loaded(values, version)` writes under the source's version;
    one older than what Redis holds is refused, and nothing is written."""
    keys = spread_keys(st, "src", 2)
    await st.write("src", dict.fromkeys(keys, b"v5"), version=5)
    await land(st, keys[:1], b"v6", (6, new_token()))

    async def newest(group: bytes, ks: Sequence[bytes]) -> Loaded:
        return Loaded(dict.fromkeys(ks, b"v7 from source"), 7)

    result = await st.read("src", keys, retry=QUICK, repair=Refetch(newest))
    assert result.repaired and result.version == 7
    await land(st, keys[:1], b"v8", (8, new_token()))

    async def lagging(group: bytes, ks: Sequence[bytes]) -> Loaded:
        return Loaded(dict.fromkeys(ks, b"v4 from a replica"), 4)

    with pytest.raises(RepairError, match="older than version 8"):
        await st.read("src", keys, retry=QUICK, repair=Refetch(lagging))
    assert Envelope.decode(await raw_get(st, keys[1]) or b"").version == 7


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_delete_leaves_tombstones_that_keep_late_writes_out(st: Stampede, mode: Mode) -> None:
    """A deleted group reads not found, and a delayed older write cannot bring it back."""
    keys = spread_keys(st, "del", 3)
    w = stamp_of(st)
    receipt = await st.delete("del", keys, mode=mode)
    assert receipt.deleted and receipt.version > w[0]
    result = await st.read("del", keys, mode=mode)
    assert result.status is Status.NOT_FOUND and result.consistent
    assert set(result.values.values()) == {None}
    assert await land(st, keys, b"late", w) == [0, 0, 0]
    assert (await st.read("del", keys, mode=mode)).status is Status.NOT_FOUND
    ttl = await st.topology.execute(keys[0].encode(), "PTTL", keys[0])
    assert 0 < ttl <= st.options.tombstone_grace * 1000
    again = await st.write("del", dict.fromkeys(keys, b"new"), mode=mode)
    assert again.superseded == ()  # a newer write re-creates it
    assert (await st.read("del", keys, mode=mode)).values == dict.fromkeys(keys, b"new")


async def test_refetch_delete_is_not_undone_by_a_late_write(st: Stampede) -> None:
    """The source says the entity is gone: tombstones, and W's late half stays out."""
    a, b = spread_keys(st, "gone", 2)
    await st.write("gone", {a: b"old", b: b"old"})
    w = stamp_of(st)
    await land(st, [a], b"w", w)

    async def loader(group: bytes, keys: Sequence[bytes]) -> None:
        return None

    result = await st.read("gone", [a, b], retry=QUICK, repair=Refetch(loader))
    assert result.status is Status.NOT_FOUND and result.repair is not None
    assert result.repair.action is RepairAction.DELETED
    assert await land(st, [b], b"w", w) == [0]
    assert (await st.read("gone", [a, b])).status is Status.NOT_FOUND


async def test_expired_group_is_not_recreated_by_an_older_write(st: Stampede) -> None:
    """A delayed older write carries its own absolute expiry: arriving after the newer
    write expired, it expires at once instead of bringing the group back."""
    keys = spread_keys(st, "exp", 2)
    old = stamp_of(st)
    old_at = time.time_ns() // 1_000_000 + 200
    await st.write("exp", dict.fromkeys(keys, b"newer"), ttl=0.25)
    await asyncio.sleep(0.4)
    assert (await st.read("exp", keys)).status is Status.NOT_FOUND
    await land(st, keys, b"older", old, expire_at_ms=old_at)
    assert (await st.read("exp", keys)).status is Status.NOT_FOUND


async def test_ttl_must_be_positive(st: Stampede) -> None:
    """A ttl of zero or less would drop the acknowledged write at once: refused."""
    for bad in (0, -1, 0.0, float("nan"), float("inf")):
        with pytest.raises(ConfigurationError, match="ttl"):
            await st.write("ttl", {"ttl:a": b"x"}, ttl=bad)
    assert await raw_get(st, "ttl:a") is None


async def test_roll_forward_record_expires_with_the_data(st: Stampede) -> None:
    """The record a roll-forward writes carries the data's own expiry."""
    keys = spread_keys(st, "rf", 2)
    version, token = stamp_of(st)
    at = time.time_ns() // 1_000_000 + 60_000
    await land(st, keys, b"d", (version, token), expire_at_ms=at)
    result = await st.read("rf", keys, mode="commit", retry=QUICK, repair=NewestWins())
    assert result.repair is not None and result.repair.action is RepairAction.ROLLED_FORWARD
    ckey = commit_key(b"rf")
    assert await st.topology.execute(ckey, "PEXPIRETIME", ckey) == at


@pytest.mark.parametrize("strategy", ["newest", "refetch"])
async def test_repair_keeps_the_expiry_of_the_write_it_completes(
    st: Stampede, strategy: str
) -> None:
    """A repaired group keeps the expiry its newest write carried, record included."""
    a, b = spread_keys(st, "keep", 2)
    await st.write("keep", {a: b"old", b: b"old"}, mode="commit", ttl=120)
    at = time.time_ns() // 1_000_000 + 60_000
    await land(st, [a], b"w", stamp_of(st), expire_at_ms=at)

    async def loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        return dict.fromkeys(keys, b"source")

    repair = NewestWins() if strategy == "newest" else Refetch(loader)
    result = await st.read("keep", [a, b], mode="commit", retry=QUICK, repair=repair)
    assert result.repaired
    for key in (a.encode(), b.encode(), commit_key(b"keep")):
        assert await st.topology.execute(key, "PEXPIRETIME", key) == at


@pytest.mark.parametrize("mode", ["stamp", "commit"])
async def test_newest_wins_never_makes_an_older_payload_immortal(
    st: Stampede, mode: Literal["stamp", "commit"]
) -> None:
    """NewestWins (no rebuild) keeps each key's own payload. One key holds an older
    write that expires, the newest write (no ttl) reached the other key only: the
    older payload is re-stamped with its own write's expiry, not with none (it was
    written without expiry: that payload never expired). repair.md: a repair never
    writes a value without an expiry for a write that had one."""
    a, b = spread_keys(st, "mortal", 2)
    await st.write("mortal", {a: b"old", b: b"old"}, mode=mode, ttl=120)
    at = await st.topology.execute(b.encode(), "PEXPIRETIME", b)
    await land(st, [a], b"w", stamp_of(st))  # the newest write, no ttl, died after a
    result = await st.read("mortal", [a, b], mode=mode, retry=QUICK, repair=NewestWins())
    assert result.repaired and result.values == {a: b"w", b: b"old"}
    keys = [a.encode(), b.encode()] + ([commit_key(b"mortal")] if mode == "commit" else [])
    for key in keys:
        assert await st.topology.execute(key, "PEXPIRETIME", key) == at, key
    assert await without_expiry(st) == []


@pytest.mark.parametrize("racer", ["no ttl", "shorter ttl"])
@pytest.mark.parametrize("strategy", ["rebuild", "refetch"])
async def test_a_repair_never_takes_the_expiry_of_a_write_that_landed_after_its_read(
    st: Stampede, strategy: str, racer: str
) -> None:
    """W1 (ttl) at both keys, W2 (ttl) reached `a` only: torn. Between the repair's
    read and its writes, W3 lands at `a` (no ttl, or a shorter one) and dies there.
    The repair keeps the expiry of the write it completes (W2), which it can no
    longer learn from `a`: it must not take W3's. It used to read `a`'s expiry as
    W2's and write `b` with none (immortal: W2's payload, or the source's, for ever)
    or with W3's shorter one."""
    a, b = spread_keys(st, f"exprace-{strategy}-{racer[:2]}", 2)
    group = a.rsplit(":", 1)[0]
    now = time.time_ns() // 1_000_000
    await st.write(group, {a: b"w1", b: b"w1"}, ttl=7200)
    at1 = int(await st.topology.execute(b.encode(), "PEXPIRETIME", b))
    at2 = now + 3_600_000
    await land(st, [a], b"w2", stamp_of(st), expire_at_ms=at2)
    racer_at = None if racer == "no ttl" else now + 600_000

    async def w3_lands() -> None:
        await land(st, [a], b"w3", stamp_of(st), expire_at_ms=racer_at)

    async def rebuild(truth: Mapping[bytes, bytes], stale: Sequence[bytes]) -> dict[bytes, bytes]:
        await w3_lands()
        return dict.fromkeys(stale, b"rebuilt")

    async def loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        await w3_lands()
        return dict.fromkeys(keys, b"source")

    repair = NewestWins(rebuild=rebuild) if strategy == "rebuild" else Refetch(loader)
    result = await st.read(group, [a, b], retry=QUICK, repair=repair)
    assert result.repair is not None and not result.repaired
    assert result.repair.action is RepairAction.LOST_RACE
    assert Envelope.decode(await raw_get(st, a) or b"").payload == b"w3"
    assert int(await st.topology.execute(b.encode(), "PEXPIRETIME", b)) in (at1, at2)
    assert await without_expiry(st, allowed=[a]) == []


class BeforeExpiry(DelegatingTopology):
    """Runs `meanwhile` before the first PEXPIRETIME: a write landing between a
    repair's read and its look at the expiry of the write it completes."""

    def __init__(self, inner: Topology, meanwhile: Callable[[], Awaitable[object]]) -> None:
        super().__init__(inner)
        self.meanwhile: Callable[[], Awaitable[object]] | None = meanwhile

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        if args and args[0] == "PEXPIRETIME" and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await self.inner.execute(key, *args, resend=resend)


async def test_a_roll_forward_never_takes_the_expiry_of_a_write_that_landed_after_its_read(
    st: Stampede,
) -> None:
    """Commit mode: W (ttl) is whole in the data, its record lost: a repair rolls it
    forward, writing W's record with W's expiry. W3 (no ttl) lands at every key, its
    writer dying before its record, between the repair's read and its look at the
    expiry: the record of W was written with W3's expiry (none: an immortal record);
    now the repair writes nothing and reads the group again."""
    a, b = spread_keys(st, "rfrace", 2)
    at = time.time_ns() // 1_000_000 + 3_600_000
    await land(st, [a, b], b"w", stamp_of(st), expire_at_ms=at)

    async def w3_lands() -> None:
        await land(st, [a, b], b"w3", stamp_of(st))

    keys = (a.encode(), b.encode())
    obs = await pipeline.observe(st.topology, b"rfrace", keys, Mode.COMMIT)
    ctx = RepairContext(BeforeExpiry(st.topology, w3_lands), Mode.COMMIT, st.versions)
    outcome = await NewestWins().repair(ctx, obs, judge(obs).exhausted())
    assert outcome.action is RepairAction.LOST_RACE
    assert await without_expiry(st, allowed=[a, b]) == []


@pytest.mark.parametrize("strategy", ["newest", "refetch"])
async def test_a_repair_never_shortens_the_tombstones_of_the_delete_it_completes(
    st: Stampede, strategy: str
) -> None:
    """A delete given a long grace (`st.delete(..., grace=3600)`) reached `a` only: a
    repair completes it (NewestWins) or deletes the group (Refetch: gone) with the
    reader's tombstone grace (300 s). Its tombstones must live at least as long as the
    delete's own: they keep a delayed older write out, and at `a` they used to replace
    the delete's with ones 300 s long, so that write could bring the deleted data back
    long before the delete's grace ran out."""
    a, b = spread_keys(st, f"tlong-{strategy}", 2)
    group = a.rsplit(":", 1)[0]
    await st.write(group, {a: b"w0", b: b"w0"})
    await st.delete(group, [a], grace=3600)
    until = int(await st.topology.execute(a.encode(), "PEXPIRETIME", a))

    async def gone(group: bytes, keys: Sequence[bytes]) -> None:
        return None

    repair = NewestWins() if strategy == "newest" else Refetch(gone)
    result = await st.read(group, [a, b], retry=QUICK, repair=repair)
    assert result.repaired and result.status is Status.NOT_FOUND
    for key in (a, b):
        assert int(await st.topology.execute(key.encode(), "PEXPIRETIME", key)) >= until, key


async def test_record_that_outlived_its_data_reads_not_found(st: Stampede) -> None:
    """A commit record left without data (data expired) is not a torn group forever."""
    keys = spread_keys(st, "orphan", 2)
    await st.write("orphan", dict.fromkeys(keys, b"x"), mode="commit")
    for key in keys:
        await st.topology.execute(key.encode(), "DEL", key)
    assert (await st.read("orphan", keys, mode="commit")).status is Status.NOT_FOUND


async def test_a_poisoned_version_does_not_wedge_the_client(st: Stampede) -> None:
    """Another program's envelope with version 2**63-1: reading it does not drag this
    client's clock along; its other writes go on; a write to that group says why not."""
    keys = spread_keys(st, "poison", 2)
    poison = Envelope(2**63 - 1, new_token(), b"p").encode()
    for key in keys:
        await st.topology.execute(key.encode(), "SET", key, poison)
    assert (await st.read("poison", keys)).version == 2**63 - 1
    clock = st.versions
    assert isinstance(clock, HybridClock) and clock.refused >= 1
    fine = await st.write("other", {"other:a": b"x"})
    assert fine.version < 2**62 and fine.superseded == ()
    with pytest.raises(ClockSkewError, match="max_offset"):
        await st.write("poison", dict.fromkeys(keys, b"mine"))


async def test_a_refused_write_names_a_remedy_that_works(st: Stampede) -> None:
    """Each refusal's remedy works: a key stamped a year ahead names stampede's delete
    (which clears such values), after which the group is written again; a value of
    the other version kind names a DEL outside stampede (a delete is refused there
    as a write is), after which the group is written again too."""
    keys = spread_keys(st, "remedy", 2)
    ahead = Envelope(time.time_ns() + YEAR_MS * 10**6, new_token(), b"p").encode()
    for key in keys:
        await st.topology.execute(key.encode(), "SET", key, ahead)
    with pytest.raises(ClockSkewError, match="delete the group"):
        await st.write("remedy", dict.fromkeys(keys, b"mine"))
    await st.delete("remedy", keys)
    assert not (await st.write("remedy", dict.fromkeys(keys, b"mine"))).superseded
    counted = Envelope(7, new_token(), b"p").encode()
    for key in keys:
        await st.topology.execute(key.encode(), "SET", key, counted)
    with pytest.raises(OrderingError, match="DEL its keys outside stampede"):
        await st.write("remedy", dict.fromkeys(keys, b"mine"))
    with pytest.raises(OrderingError, match="DEL its keys outside stampede"):
        await st.delete("remedy", keys)
    for key in keys:
        await st.topology.execute(key.encode(), "DEL", key)
    assert not (await st.write("remedy", dict.fromkeys(keys, b"mine"))).superseded


async def test_a_clock_a_year_ahead_does_not_spread(topology_env: tuple[str, object]) -> None:
    """A writer a year ahead: readers do not adopt its time, and their writes to its
    group fail with ClockSkewError instead of being silently superseded."""
    kind, env = topology_env
    ahead = open_stampede(env, kind, versions=HybridClock(offset_ms=YEAR_MS))
    honest = open_stampede(env, kind)
    async with ahead, honest:
        keys = spread_keys(honest, "skew", 2)
        await ahead.write("skew", dict.fromkeys(keys, b"future"))
        assert (await honest.read("skew", keys)).consistent
        mine = await honest.write("mine", {"mine:a": b"x"})
        assert mine.version < time.time_ns() + 10**10
        with pytest.raises(ClockSkewError):
            await honest.write("skew", dict.fromkeys(keys, b"now"))


@pytest.mark.parametrize("mode", ["stamp", "commit"])
@pytest.mark.parametrize("ahead_by", ["a year", "2**63-1"])
async def test_a_group_stamped_from_the_future_can_be_deleted(
    topology_env: tuple[str, object], mode: Literal["stamp", "commit"], ahead_by: str
) -> None:
    """What ClockSkewError (and stamps.md) says to do about a group stamped far ahead,
    "fix the clock, then delete the group": the delete clears it (its tombstones land
    and expire), and the group is writable again. The delete was refused as well, so
    such a group stayed unwritable until that time (the year 2262 for 2**63-1)."""
    kind, env = topology_env
    # (a grace long enough for the delete's four round trips on a loaded machine: its
    # tombstones' expiry instant is fixed before the first, and one landing past it is
    # refused as expired, ClockSkewError; 50 ms was exceeded once under load)
    honest = open_stampede(env, kind, tombstone_grace=0.5)
    async with honest:
        keys = spread_keys(honest, "skewed", 2)
        record = [commit_key(b"skewed").decode()] if mode == "commit" else []
        if ahead_by == "a year":
            async with open_stampede(env, kind, versions=HybridClock(offset_ms=YEAR_MS)) as ahead:
                await ahead.write("skewed", dict.fromkeys(keys, b"future"), mode=mode)
        else:
            poison = Envelope(2**63 - 1, new_token(), b"p").encode()
            for key in [*keys, *record]:
                await honest.topology.execute(key.encode(), "SET", key, poison)
        with pytest.raises(ClockSkewError, match="delete the group"):
            await honest.write("skewed", dict.fromkeys(keys, b"now"), mode=mode)
        receipt = await honest.delete("skewed", keys, mode=mode)
        assert receipt.deleted and receipt.superseded == ()
        assert (await honest.read("skewed", keys, mode=mode)).status is Status.NOT_FOUND
        for key in keys:  # the tombstones expire: nothing of the future is left
            await gone(honest, key)
        again = await honest.write("skewed", dict.fromkeys(keys, b"now"), mode=mode)
        assert again.superseded == ()
        got = await honest.read("skewed", keys, mode=mode)
        assert got.values == dict.fromkeys(keys, b"now")
        assert await without_expiry(honest, allowed=[*keys, *record]) == []


async def test_a_delete_from_a_clock_behind_clears_nothing(
    topology_env: tuple[str, object],
) -> None:
    """A deleter whose own clock is an hour behind finds honest values beyond its limit:
    they are not from the future (its servers' clocks say so), so its delete is refused
    (ClockSkewError) and clears nothing; an older write resent later could otherwise
    land over its older tombstone and bring deleted data back."""
    kind, env = topology_env
    honest = open_stampede(env, kind)
    behind = open_stampede(env, kind, versions=HybridClock(offset_ms=-3600 * 1000))
    async with honest, behind:
        keys = spread_keys(honest, "behind", 2)
        await honest.write("behind", dict.fromkeys(keys, b"now"))
        with pytest.raises(ClockSkewError):
            await behind.delete("behind", keys)
        assert (await honest.read("behind", keys)).values == dict.fromkeys(keys, b"now")


async def test_sequential_writers_within_a_millisecond(topology_env: tuple[str, object]) -> None:
    """Two clients writing one after the other: the later write is never kept out."""
    kind, env = topology_env
    first, second = open_stampede(env, kind), open_stampede(env, kind)
    async with first, second:
        keys = spread_keys(first, "seq", 2)
        for i in range(200):
            writer = (first, second)[i % 2]
            receipt = await writer.write("seq", dict.fromkeys(keys, b"%d" % i))
            assert receipt.superseded == (), i
        final = await first.read("seq", keys)
        assert set(final.values.values()) == {b"199"}


async def test_counter_after_clock_versions_is_refused(st: Stampede) -> None:
    """Clock and sequence versions cannot be ordered: a Counter write to a group written
    by a HybridClock raises OrderingError instead of being superseded forever."""
    keys = spread_keys(st, "mixed", 2)
    await st.write("mixed", dict.fromkeys(keys, b"clock"))
    with pytest.raises(OrderingError, match="other kind") as info:
        await st.write("mixed", dict.fromkeys(keys, b"counter"), versions=Counter())
    assert info.value.why == "mixed-sources"
    assert set((await st.read("mixed", keys)).values.values()) == {b"clock"}


async def test_foreign_overlong_version_is_refused(st: Stampede) -> None:
    """An envelope-like value with a 20-digit version is not kept as newer forever."""
    key = "foreign:a"
    await st.topology.execute(key.encode(), "SET", key, f"{10**20}:{new_token()}:x")
    with pytest.raises(OrderingError, match="another program") as info:
        await st.write("foreign", {key: b"mine"})
    assert info.value.why == "foreign"


@pytest.mark.parametrize(
    "token",
    ["IIIIIIIIIIIIIIIIIIIIIIIIII", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01JD4Z8X3T0Y7K9M2N5P6Q8R1U"],
)
async def test_a_token_that_is_no_ulid_is_no_envelope(st: Stampede, token: str) -> None:
    """Another program's `<digits>:<26 capitals>:...` whose token is no ULID (a letter
    Crockford's base32 leaves out, a first character past 7) is no envelope: readers
    say `unstamped`, so a write lands over it (a clock write was refused as of the
    other kind, a sequence write kept out as superseded), and so does a transaction."""
    keys = spread_keys(st, "notulid", 2)
    for key in keys:
        await st.topology.execute(key.encode(), "SET", key, f"5:{token}:theirs")
    with pytest.raises(TornReadError) as info:
        await st.read("notulid", keys)
    assert info.value.reason == "unstamped"
    receipt = await st.write("notulid", {keys[0]: b"mine"}, version=3)
    assert not receipt.superseded
    async with st.transaction() as tx:
        tx.set(keys[1], b"ours")
    assert tx.receipt is not None and not tx.receipt.pending
    for key, want in zip(keys, (b"mine", b"ours"), strict=True):
        stored = await st.topology.execute(key.encode(), "GET", key)
        assert Envelope.decode(stored).payload == want


async def test_bad_keys_are_refused_before_anything_is_sent(st: Stampede) -> None:
    """Reserved record names and one key named twice raise InvalidKeyError; nothing lands."""
    for reserved in ("g:stampede:commit", "g:stampede:version", "{g:a}:stampede:p"):
        with pytest.raises(InvalidKeyError, match="stampede's own keys"):
            await st.write("g", {"g:a": b"x", reserved: b"y"})
    with pytest.raises(InvalidKeyError, match="named twice"):
        await st.write("g", {"g:a": b"x", b"g:a": b"y"})  # type: ignore[type-var]
    with pytest.raises(InvalidKeyError, match="list of key names"):
        await st.read("g", "g:a")
    with pytest.raises(InvalidValueError, match="must be bytes or str"):
        await st.write("g", {"g:a": 5})  # type: ignore[dict-item]
    assert await raw_get(st, "g:a") is None


async def test_loader_returning_text_is_a_clear_error(st: Stampede) -> None:
    """A Refetch loader that returns str is named, with the key, and nothing is written."""
    a, b = spread_keys(st, "txt", 2)
    await st.write("txt", {a: b"old", b: b"old"})
    await land(st, [a], b"w", stamp_of(st))
    before = [await raw_get(st, a), await raw_get(st, b)]

    async def loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, str]:
        return dict.fromkeys(keys, "text")

    with pytest.raises(InvalidValueError, match="returned str for key"):
        await st.read("txt", [a, b], retry=QUICK, repair=Refetch(loader))  # type: ignore[arg-type]
    assert [await raw_get(st, a), await raw_get(st, b)] == before


async def test_update_refuses_what_it_cannot_order(st: Stampede) -> None:
    """update() checks what the guard would refuse before planning: a poisoned version
    (ClockSkewError) or the other kind of version (OrderingError), not an overflow."""
    keys = ["acct:{9}:balance", "acct:{9}:owner"]
    poison = Envelope(2**63 - 1, new_token(), b"1").encode()
    for key in keys:
        await st.topology.execute(key.encode(), "SET", key, poison)

    def bump(current: Mapping[str, bytes | None]) -> dict[str, bytes]:
        return dict.fromkeys(keys, b"2")

    with pytest.raises(ClockSkewError):
        await st.update("acct:{9}", keys, bump)
    for key in keys:
        await st.topology.execute(key.encode(), "DEL", key)
    await st.write("acct:{9}", dict.fromkeys(keys, b"1"), version=3)
    with pytest.raises(OrderingError, match="other kind"):
        await st.update("acct:{9}", keys, bump)


async def test_kept_versions_never_go_below_an_acknowledged_write(st: Stampede) -> None:
    """W3 whole; W0 (newest) reaches k2 only; W2 (between) is acknowledged with k2
    superseded. A read must not answer with W3 from the kept versions: W2 was
    acknowledged before it began."""
    a, b, c = spread_keys(st, "floor", 3)
    await st.write("floor", dict.fromkeys([a, b, c], b"w3"))
    w2 = stamp_of(st)
    w0 = stamp_of(st)
    out = await st.topology.write_guarded(
        [c.encode()], [Envelope(w0[0], w0[1], b"w0").encode()], version=w0[0], token=w0[1]
    )
    assert out.ok
    done = await st.topology.write_guarded(
        [k.encode() for k in (a, b, c)],
        [Envelope(w2[0], w2[1], b"w2").encode()] * 3,
        version=w2[0],
        token=w2[1],
    )
    assert [done.results[k.encode()] for k in (a, b, c)] == [1, 1, 0]  # acknowledged
    try:
        got = await st.read("floor", [a, b, c], retry=QUICK)
    except TornReadError:
        return  # torn until W0 completes or a repair runs: fine
    assert b"w3" not in got.values.values(), got.values


class HeldUp(DelegatingTopology):
    """Runs `meanwhile` before the first guarded write goes out: what happens while a
    write is held up between drawing its version and reaching Redis (a failover's
    resends, a slow shard)."""

    def __init__(self, inner: Topology, meanwhile: Callable[[], Awaitable[object]]) -> None:
        super().__init__(inner)
        self.meanwhile: Callable[[], Awaitable[object]] | None = meanwhile

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await self.inner.write_guarded(keys, values, **stamp)


async def test_a_late_write_meeting_a_newer_one_is_superseded_not_a_clock_skew(
    st: Stampede,
) -> None:
    """A write held up longer than max_offset, while another writer (with the same,
    honest clock) wrote the group: the newer write's version is beyond the late write's
    limit as drawn, but not beyond the clock now. The late write is kept out
    (superseded), not refused as ClockSkewError (found by the Sentinel failover chaos
    scenario)."""
    now = [time.time_ns()]
    clock = HybridClock(clock=lambda: now[0], max_offset=5.0)
    keys = spread_keys(st, "held", 2)
    raw = [k.encode() for k in keys]

    async def newer_write_meanwhile() -> None:
        now[0] += 7 * 10**9  # held up for 7 s
        other = HybridClock(clock=lambda: now[0])
        await write_group(
            st.topology, b"held", raw, [b"newer"] * 2, mode=Mode.STAMP, versions=other, ttl=None
        )

    late = await write_group(
        HeldUp(st.topology, newer_write_meanwhile),
        b"held",
        raw,
        [b"late"] * 2,
        mode=Mode.STAMP,
        versions=clock,
        ttl=None,
    )
    assert set(late.superseded) == set(raw)
    assert (await st.read("held", keys)).values == dict.fromkeys(keys, b"newer")


async def test_a_late_delete_meeting_a_newer_write_leaves_it(st: Stampede) -> None:
    """A delete held up longer than max_offset meets a newer write of an honest clock:
    it is kept out (superseded), and the newer write is not cleared as if it came from
    a clock far ahead."""
    now = [time.time_ns()]
    clock = HybridClock(clock=lambda: now[0], max_offset=5.0)
    keys = spread_keys(st, "helddel", 2)
    raw = [k.encode() for k in keys]

    async def newer_write_meanwhile() -> None:
        now[0] += 7 * 10**9  # held up for 7 s
        other = HybridClock(clock=lambda: now[0])
        await write_group(
            st.topology, b"helddel", raw, [b"newer"] * 2, mode=Mode.STAMP, versions=other, ttl=None
        )

    late = await write_group(
        HeldUp(st.topology, newer_write_meanwhile),
        b"helddel",
        raw,
        [None, None],
        mode=Mode.STAMP,
        versions=clock,
        ttl=60,
    )
    assert set(late.superseded) == set(raw)
    assert (await st.read("helddel", keys)).values == dict.fromkeys(keys, b"newer")


async def test_reads_refuse_keys_that_are_no_list_and_take_a_generator(st: Stampede) -> None:
    """`read` and `read_atomic` given no list of keys (None, a number) raise
    InvalidKeyError saying so (not TypeError); a generator of keys reads like its list."""
    for bad in (None, 5):
        with pytest.raises(InvalidKeyError, match="list of key names"):
            await st.read("g", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError, match="list of key names"):
            await st.read_atomic(bad)  # type: ignore[arg-type]
    await st.write("g:{7}", {"g:{7}:a": b"x", "g:{7}:b": b"y"})
    got = await st.read("g:{7}", (k for k in ["g:{7}:a", "g:{7}:b"]))  # type: ignore[arg-type]
    assert got.consistent
    assert list(got.values.values()) == [b"x", b"y"]
    tx = st.transaction()
    tx.set("g:{8}:a", b"1")
    await tx.commit()
    atomic = await st.read_atomic(k for k in ["g:{8}:a"])  # type: ignore[arg-type]
    assert list(atomic.values.values()) == [b"1"]


async def test_a_repair_does_not_spread_a_version_from_the_far_future(
    topology_env: tuple[str, object],
) -> None:
    """A writer an hour ahead reached one key of a group (it died there); the other
    keys hold an honest write. `NewestWins` would stamp its repair after the newest
    stamp, the future one, and carry it to every key: each would then refuse every
    honest write (ClockSkewError) where one key did. The repair refuses instead,
    writing nothing, as a write over such a version does."""
    kind, env = topology_env
    ahead = open_stampede(env, kind, versions=HybridClock(offset_ms=3_600_000))
    honest = open_stampede(env, kind)
    async with ahead, honest:
        keys = spread_keys(honest, "farrep", 3)
        await honest.write("farrep", dict.fromkeys(keys, b"honest"))
        before = {k: await honest.topology.execute(k.encode(), "GET", k.encode()) for k in keys}
        clock = ahead.versions
        # its write reached keys[0] only, keeping nothing there for group reads
        await write_group(
            ahead.topology, b"farrep", [keys[0].encode()], [b"future"],
            mode=Mode.STAMP, versions=clock, ttl=None, keep_ms=0,
        )  # fmt: skip
        with pytest.raises(RepairError, match="ahead of this clock"):
            await honest.read("farrep", keys, repair=NewestWins(), retry=QUICK)
        for k in keys[1:]:
            assert await honest.topology.execute(k.encode(), "GET", k.encode()) == before[k]
