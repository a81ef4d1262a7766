"""Read-atomic transactions at their edges: deletes, expiry, lost commits, lost
replies, refusals, repairs and group writes meeting transactions, and leaks. Each
test failed before the mechanism it names was fixed; every one runs on both
topologies."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

import stampede
from stampede import (
    Durability,
    Envelope,
    HybridClock,
    InvalidKeyError,
    MixedWritersError,
    Mode,
    OutcomeUnknownError,
    PartialWriteError,
    RetryPolicy,
    Stampede,
    Status,
    TornReadError,
    TransactionAborted,
    metrics,
)
from stampede._kept import newest_whole
from stampede._lua import Script
from stampede._txn.scripts import COMMIT, COMMIT_ONE, PREPARE, ROUND2
from stampede._txn.sweep import sweep
from stampede._txn.write import Transaction, run_units
from stampede.errors import ConfigurationError, ShardUnavailable
from stampede.repair import NewestWins, Refetch
from stampede.results import GuardCode, RepairAction
from stampede.testing import LocalPrimaries
from stampede.testing.faults import DelegatingTopology
from stampede.topology._guard import GUARD, requests_for
from stampede.typing import GuardStamp, RepairContext
from stampede.verdict import Observation, judge
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, mark_record, side_key

from ..support import FAST, eventually, gone, open_stampede, raw_value, spread_keys

QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=5.0)


async def _stampede_keys(st: Stampede) -> list[bytes]:
    """Every version hash and kept list left on every shard."""
    found: list[bytes] = []
    for shard in st.topology.shard_names:
        for pattern in (
            b"*:stampede:v",
            b"*:stampede:v:u",
            b"stampede:v:{*",
            b"*:stampede:p",
            b"*:stampede:p:u",
        ):
            cursor: Any = b"0"
            while True:
                cursor, keys = await st.topology.execute_on(
                    shard, "SCAN", cursor, "MATCH", pattern, "COUNT", 1000
                )
                found.extend(keys)
                if cursor in (b"0", 0, "0"):
                    break
    return found


# -- 1. deleted or expired keys never come back ------------------------------------


@pytest.mark.parametrize("how", ["tx.delete", "st.delete", "ttl", "st.write ttl", "update ttl"])
async def test_a_key_deleted_or_expired_after_its_transaction_stays_gone(
    quick: Stampede, how: str
) -> None:
    """T writes A and B; A is then deleted (transaction or group delete) or rewritten
    with a TTL (by a transaction, a group write or an update), and its tombstone or
    value expires. read_atomic reads A as missing, never writes T's old A back, and
    keeps doing so after the grace window."""
    st = quick
    # (TTLs of 0.5 s: an update's WATCH/MULTI round trips on a loaded machine outlasted
    # 0.05 s, and a write landing past its expiry instant is refused, ClockSkewError)
    a, b = spread_keys(st, f"gone-{how}", 2)
    async with st.transaction() as tx:
        tx.set(a, b"a1")
        tx.set(b, b"b1")
    if how == "tx.delete":
        async with st.transaction() as tx:
            tx.delete(a)
    elif how == "st.delete":
        await st.delete(a, [a], grace=0.5)
    elif how == "st.write ttl":
        await st.write(a, {a: b"a2"}, ttl=0.5)
    elif how == "update ttl":
        await st.update(a, [a], lambda cur: {a: b"a2"}, ttl=0.5)
    else:
        async with st.transaction(ttl=0.5) as tx:
            tx.set(a, b"a2")
    await gone(st, a)
    for _ in range(3):
        got = await st.read_atomic([a, b])
        assert got.values == {a: None, b: b"b1"}
        assert await raw_value(st, a) is None, "read_atomic wrote a deleted value back"
    await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"b1"}
    assert await raw_value(st, a) is None


async def test_a_prepared_version_past_its_expiry_is_not_rolled_forward(st: Stampede) -> None:
    """A writer that committed one key and died: if the transaction's expiry instant has
    passed, the reader reads the other key as gone and does not write it."""
    a, b = spread_keys(st, "late", 2)
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    at = 1  # an instant long past
    env = b"%d:%s:v" % (version, token.encode())
    args = [(version, token, 0, at, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    got = await st.read_atomic([a, b])
    assert got.values == {a: None, b: None}
    assert await raw_value(st, a) is None and await raw_value(st, b) is None


# -- 2. an acknowledged transaction is never lost ----------------------------------


class FailingCommits(DelegatingTopology):
    """Runs (or not) COMMIT scripts, then reports the connection lost."""

    def __init__(self, inner: Any, *, run_first: bool, times: int | None) -> None:
        super().__init__(inner)
        self.run_first = run_first
        self.times = times
        self.hits = 0

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha in (COMMIT.sha, COMMIT_ONE.sha) and (
            self.times is None or self.hits < self.times
        ):
            self.hits += 1
            if self.run_first:
                await self.inner.script(script, keys, args)
            raise ShardUnavailable("connection lost (injected)", shard="test")
        return await self.inner.script(script, keys, args)


async def test_no_commit_acknowledged_anywhere_is_outcome_unknown(quick: Stampede) -> None:
    """Every prepare acknowledged, no commit reached any shard: not a receipt (which
    would promise a transaction nobody will ever see) but OutcomeUnknownError."""
    st = quick
    keys = spread_keys(st, "nocommit", 3)
    faulty = FailingCommits(st.topology, run_first=False, times=None)
    tx = st.transaction()
    tx._topology = faulty  # noqa: SLF001 - the test swaps in a faulty topology
    for key in keys:
        tx.set(key, b"x")
    with pytest.raises(OutcomeUnknownError, match="no commit acknowledged"):
        await tx.commit()
    assert faulty.hits >= 2  # resent before giving up


class LostPrepares(DelegatingTopology):
    """Deletes every version hash a COMMIT call names before running it, as a failover
    to a replica that had not received the prepares would."""

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha == COMMIT.sha:
            for key in keys[1::2]:  # (data key, version hash) pairs
                await self.inner.execute(key, "DEL", key)
        return await self.inner.script(script, keys, args)


async def test_a_commit_that_finds_no_prepared_version_anywhere_is_no_receipt(
    st: Stampede,
) -> None:
    """Every prepare acknowledged, then lost before the commit: no key can ever hold the
    transaction, so the writer raises TransactionAborted instead of returning a receipt
    (every key `pending`) for a transaction nobody will see."""
    keys = spread_keys(st, "lostprep", 3)
    tx = st.transaction()
    tx._topology = LostPrepares(st.topology)  # noqa: SLF001 - the test swaps in a faulty topology
    for key in keys:
        tx.set(key, b"x")
    with pytest.raises(TransactionAborted, match="prepared version was gone"):
        await tx.commit()
    assert tx.receipt is None
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys)


class LostPrepareAt(DelegatingTopology):
    """Deletes `key`'s version hash before the first COMMIT call naming it, as a
    failover of that shard alone to a replica that had not received the prepare would;
    counts the PREPARE calls naming `key`, and before the second one runs `before`."""

    def __init__(self, inner: Any, key: str, before: Any = None) -> None:
        super().__init__(inner)
        self.key, self.before = key.encode(), before
        self.lost = False
        self.prepares = 0

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        pairs = dict(zip(keys[::2], keys[1::2], strict=True))
        if script.sha == COMMIT.sha and self.key in pairs and not self.lost:
            self.lost = True
            await self.inner.execute(pairs[self.key], "DEL", pairs[self.key])
        if script.sha == PREPARE.sha and self.key in pairs:
            self.prepares += 1
            if self.prepares == 2 and self.before is not None:
                await self.before()
        return await self.inner.script(script, keys, args)


async def test_a_prepare_lost_at_one_key_is_prepared_again_by_the_writer(st: Stampede) -> None:
    """Every prepare acknowledged, then one key's lost before its commit while another
    key commits: the writer prepares that key again and commits it, so the receipt has
    nothing pending and read_atomic returns the transaction whole (it used to list the
    key as pending, and read_atomic read it as missing for good)."""
    keys = spread_keys(st, "lostone", 3)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    lossy = LostPrepareAt(st.topology, keys[0])
    tx = stampede.Stampede(lossy).transaction()
    for key in keys:
        tx.set(key, b"new")
    receipt = await tx.commit()
    assert lossy.lost and lossy.prepares == 2
    assert receipt.pending == () and receipt.superseded == ()
    got = await st.read_atomic(keys)
    assert got.values == dict.fromkeys(keys, b"new") and got.rounds == 1


async def test_a_lost_prepare_that_the_key_then_refuses_is_pending_not_retried(
    st: Stampede,
) -> None:
    """The key's prepare again is refused (a list was written there meanwhile): the key
    stays pending on the receipt, and the writer does not prepare it again and again
    until the transaction timeout."""
    keys = spread_keys(st, "lostrefused", 3)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")

    async def list_there() -> None:
        await st.topology.execute(keys[0].encode(), "DEL", keys[0])
        await st.topology.execute(keys[0].encode(), "RPUSH", keys[0], "x")

    lossy = LostPrepareAt(st.topology, keys[0], list_there)
    tx = stampede.Stampede(lossy).transaction()
    for key in keys:
        tx.set(key, b"new")
    receipt = await tx.commit()
    assert lossy.prepares == 2 and receipt.pending == (keys[0].encode(),)
    assert (await st.read_atomic(keys[1:])).values == dict.fromkeys(keys[1:], b"new")


async def test_a_commit_that_fails_once_is_resent(quick: Stampede) -> None:
    """A commit whose connection failed is resent (it is idempotent): the receipt has
    nothing pending and every key holds the transaction."""
    st = quick
    keys = spread_keys(st, "resent", 3)
    faulty = FailingCommits(st.topology, run_first=False, times=1)
    tx = st.transaction()
    tx._topology = faulty  # noqa: SLF001 - the test swaps in a faulty topology
    for key in keys:
        tx.set(key, b"x")
    receipt = await tx.commit()
    assert receipt.pending == ()
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"x")


# -- 3. a lost reply of a one-slot transaction: exactly once or unknown ------------


async def test_one_slot_transaction_whose_reply_was_lost_commits_once(st: Stampede) -> None:
    """The one-slot call ran and its reply was lost: it is resent, finds its own stamp
    stored, and returns the receipt, not TransactionAborted."""
    faulty = FailingCommits(st.topology, run_first=True, times=1)
    tx = st.transaction()
    tx._topology = faulty  # noqa: SLF001 - the test swaps in a faulty topology
    tx.set("acct:{lost}:a", b"1")
    tx.set("acct:{lost}:b", b"2")
    receipt = await tx.commit()
    assert receipt.atomic and faulty.hits == 1
    stored = Envelope.decode(await raw_value(st, "acct:{lost}:a") or b"")
    assert stored.token == receipt.token


async def test_one_slot_transaction_whose_replies_stay_lost_is_outcome_unknown(
    st: Stampede,
) -> None:
    """Every send ran and lost its reply: OutcomeUnknownError, never "nothing was
    committed" (it was)."""
    faulty = FailingCommits(st.topology, run_first=True, times=None)
    tx = st.transaction()
    tx._topology = faulty  # noqa: SLF001 - the test swaps in a faulty topology
    tx.set("acct:{lost2}:a", b"1")
    with pytest.raises(OutcomeUnknownError):
        await tx.commit()
    assert await raw_value(st, "acct:{lost2}:a") is not None


# -- 4. one slot is all or nothing --------------------------------------------------


async def test_one_slot_transaction_with_a_refused_key_writes_nothing(st: Stampede) -> None:
    """A key of another type refuses the one-slot transaction: no other key changes."""
    await st.topology.execute(b"acct:{aon}:b", "RPUSH", "acct:{aon}:b", "x")
    with pytest.raises(InvalidKeyError, match="WRONGTYPE"):
        async with st.transaction() as tx:
            tx.set("acct:{aon}:a", b"1")
            tx.set("acct:{aon}:b", b"2")
    assert await raw_value(st, "acct:{aon}:a") is None


# -- 5. a repair never destroys a transaction ---------------------------------------


async def test_a_group_repair_completes_a_pending_transaction(st: Stampede) -> None:
    """T committed at A, prepared (pending) at B. A repairing group read completes T
    instead of restamping B's old value above it: read_atomic returns T whole."""
    a, b = spread_keys(st, "rtx", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:new" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    done = await run_units(
        st.topology, COMMIT, raw[:1], sides[:1], [(version, token, 0)], head=[5000]
    )
    assert done == [1]
    result = await st.read("rtx", [a, b], retry=QUICK, repair=NewestWins())
    assert result.consistent and result.values == {a: b"new", b: b"new"}
    assert (await st.read_atomic([a, b])).values == {a: b"new", b: b"new"}


# -- 6. mixing APIs is refused, not silent -------------------------------------------


async def test_a_group_read_of_one_transaction_is_whole_in_stamp_mode_only(
    st: Stampede,
) -> None:
    """stamps.md / transactions.md, which reader for which writer: a group every key of
    which one transaction wrote reads consistent in stamp mode; in commit mode no
    record names it (a transaction writes none), so it reads `uncommitted`."""
    keys = spread_keys(st, "txgroup", 2)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"v")
    got = await st.read("txgroup", keys, mode="stamp", retry=QUICK)
    assert tx.receipt is not None
    assert got.consistent and got.token == tx.receipt.token
    with pytest.raises(TornReadError) as info:
        await st.read("txgroup", keys, mode="commit", retry=QUICK)
    assert info.value.reason == "uncommitted"


async def test_read_atomic_refuses_keys_written_by_group_writes(st: Stampede) -> None:
    """A group write leaves no transaction metadata: read_atomic says so instead of
    returning what may be half of two group writes."""
    keys = spread_keys(st, "mixed", 2)
    await st.write("mixed", dict.fromkeys(keys, b"g1"))
    with pytest.raises(MixedWritersError) as caught:
        await st.read_atomic(keys)
    assert {k.decode() for k in caught.value.keys} == set(keys)


async def test_read_atomic_refuses_values_no_stampede_write_stamped(st: Stampede) -> None:
    """A plain value another program wrote is never returned as if it were whole."""
    await st.topology.execute(b"plain:{p}:a", "SET", "plain:{p}:a", "hello")
    with pytest.raises(MixedWritersError):
        await st.read_atomic(["plain:{p}:a"])


async def test_read_atomic_reads_a_group_delete_as_missing(st: Stampede) -> None:
    """A tombstone is a delete wherever it came from: read as missing."""
    keys = spread_keys(st, "gdel", 2)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"v")
    await st.delete("gdel", keys)
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys)


# -- 7. nothing leaks -----------------------------------------------------------------


async def test_version_hashes_of_deleted_keys_are_collected(quick: Stampede) -> None:
    """Keys written by transactions and then deleted (either way) leave no version
    hash behind once the grace window has passed and the sweep has run (a group
    delete's keys keep their commit marks for the prepare hold: short here)."""
    st = quick
    keys = spread_keys(st, "leak", 4)
    for i in range(3):
        async with st.transaction() as tx:
            for key in keys:
                tx.set(key, b"%d" % i)
    async with st.transaction() as tx:
        tx.delete(keys[0])
    await st.delete("leak", keys[1:3])
    async with st.transaction(ttl=0.05) as tx:
        tx.set(keys[3], b"short")
    for key in keys:
        await gone(st, key)

    async def collected() -> bool:
        await sweep(st.topology, grace=0.05, hold=0.05)
        return await _stampede_keys(st) == []

    await eventually(collected, within=30)


# -- 9. bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["stampede:shard", "stampede:repairs", "stampede:repairs:{0}", "stampede:repairs:dead"]
)
async def test_stampedes_own_key_names_are_refused_as_data(st: Stampede, key: str) -> None:
    """The shard identity record and the repair stream cannot be written as data."""
    with pytest.raises(InvalidKeyError, match="stampede's own keys"):
        await st.write("g", {key: b"x"})
    with pytest.raises(InvalidKeyError, match="stampede's own keys"):
        async with st.transaction() as tx:
            tx.set(key, b"x")
    with pytest.raises(InvalidKeyError, match="stampede's own keys"):
        await st.read_atomic([key])


async def test_read_atomic_of_a_version_hash_is_refused(st: Stampede) -> None:
    """Naming a version hash gives InvalidKeyError, not WRONGTYPE."""
    async with st.transaction() as tx:
        tx.set("vh:{1}:a", b"x")
    side = side_key(b"vh:{1}:a", st.topology.slot_of).decode()
    with pytest.raises(InvalidKeyError, match="stampede's own keys"):
        await st.read_atomic([side])


async def test_read_atomic_attempts_must_be_positive(st: Stampede) -> None:
    """attempts=0 would never read: refused before anything is sent."""
    with pytest.raises(ValueError, match="attempts"):
        await st.read_atomic(["a"], attempts=0)


async def test_an_empty_transaction_takes_no_stamp(st: Stampede) -> None:
    """Nothing to write: nothing is sent, no version is drawn."""
    async with st.transaction() as tx:
        pass
    assert tx.receipt is not None and tx.receipt.keys == () and tx.receipt.version == 0


# -- 8. a repair never extends a write's life ----------------------------------------


REBUILD = NewestWins(rebuild=lambda truth, stale: dict.fromkeys(stale, b"rebuilt"))


async def test_a_repair_of_a_group_that_expired_since_the_read_writes_nothing(
    st: Stampede,
) -> None:
    """The read saw one key expired and the other not yet; by the time the repair
    runs, the other has expired too. The repair must not bring the group back (it
    used to rewrite the missing key with no expiry at all)."""
    a, b = spread_keys(st, "expgroup", 2)
    await st.write("expgroup", {a: b"x", b: b"y"}, ttl=60)
    seen_b = await raw_value(st, b)
    obs = Observation(b"expgroup", (a.encode(), b.encode()), (None, seen_b), Mode.STAMP, None)
    await st.topology.execute(a.encode(), "DEL", a)
    await st.topology.execute(b.encode(), "DEL", b)  # b expires too, after the read
    ctx = RepairContext(st.topology, Mode.STAMP, st.versions)
    await REBUILD.repair(ctx, obs, judge(obs).exhausted())
    assert await raw_value(st, a) is None and await raw_value(st, b) is None


async def test_a_repair_of_a_key_with_empty_braces_raises_its_floor(st: Stampede) -> None:
    """A repair's compare-and-set cannot name the version hash of a key with braces
    but no tag (only the client can): it says so, and the repair raises the floor
    itself, as the guard's writes do (a transaction pending there at or below the
    repair's stamp is never completed once the repaired value is gone)."""
    a, b = "rep{}a", "rep:b"
    async with st.transaction() as tx:  # a has a version hash
        tx.set(a, b"x")
        tx.set(b, b"y")
    seen = await raw_value(st, b)
    await st.topology.execute(a.encode(), "DEL", a)  # a lost: the repair rebuilds it
    side = side_key(a.encode(), st.topology.slot_of)
    obs = Observation(b"rep", (a.encode(), b.encode()), (None, seen), Mode.STAMP, None)
    ctx = RepairContext(st.topology, Mode.STAMP, st.versions)
    await REBUILD.repair(ctx, obs, judge(obs).exhausted())
    repaired = Envelope.decode(await raw_value(st, a) or b"")
    assert repaired.payload == b"rebuilt"
    floor = await st.topology.execute(side, "HGET", side, "g")
    assert floor == b"%d:%s" % (repaired.version, repaired.token.encode())


async def test_a_repair_keeps_the_expiry_instant_of_the_write(st: Stampede) -> None:
    """One key of a TTL'd write already gone, the other still there: the repair writes
    with that write's own expiry instant, never without one."""
    a, b = spread_keys(st, "expkeep", 2)
    await st.write("expkeep", {a: b"x", b: b"y"}, ttl=60)
    at = int(await st.topology.execute(b.encode(), "PEXPIRETIME", b))
    await st.topology.execute(a.encode(), "DEL", a)  # a expired first
    result = await st.read("expkeep", [a, b], retry=QUICK, repair=REBUILD)
    assert result.repaired
    for key in (a, b):
        assert int(await st.topology.execute(key.encode(), "PEXPIRETIME", key)) == at


async def test_application_versions_above_the_sequence_range_are_refused(st: Stampede) -> None:
    """Application versions live below 2**56; above is the hybrid clock's range."""
    with pytest.raises(ConfigurationError, match="2\\*\\*56"):
        await st.write("v", {"v:{1}:a": b"x"}, version=2**62)
    with pytest.raises(ConfigurationError, match="2\\*\\*56"):
        st.transaction(version=2**56)
    await st.write("v", {"v:{1}:a": b"x"}, version=2**56 - 1)


async def test_a_foreign_envelope_with_the_largest_token_is_repaired(st: Stampede) -> None:
    """A value another program stamped with the largest ULID: a repairing read gets a
    stamp after it (the next version) instead of a ValueError."""
    a, b = "fx:{1}:a", "fx:{1}:b"
    await st.topology.execute(a.encode(), "SET", a, "200:7ZZZZZZZZZZZZZZZZZZZZZZZZZ:x")
    await st.topology.execute(b.encode(), "SET", b, "100:01JD0000000000000000000000:y")
    result = await st.read("fx:{1}", [a, b], retry=QUICK, repair=NewestWins())
    assert result.consistent and result.version == 201


# -- kept versions of group writes follow the same rule -------------------------------


async def test_kept_versions_never_outlive_the_write_that_replaced_them(st: Stampede) -> None:
    """W1, then W2 with a short TTL: once W2 has expired, nothing of W1 is left for a
    read to find (it used to live on in the kept versions for the grace window, and a
    read that saw W2 half expired returned W1 as whole)."""
    a, b = spread_keys(st, "keptexp", 2)
    await st.write("keptexp", {a: b"w1", b: b"w1"})
    await st.write("keptexp", {a: b"w2", b: b"w2"}, ttl=0.2)
    seen_b = await raw_value(st, b)
    await gone(st, a)
    await gone(st, b)
    obs = Observation(b"keptexp", (a.encode(), b.encode()), (None, seen_b), Mode.STAMP, None)
    assert await newest_whole(st.topology, obs) is None


async def test_a_counter_lives_as_long_as_the_writes_it_versions(st: Stampede) -> None:
    """A Counter-versioned group: its counter has no expiry while the data has none,
    and takes the delete's expiry (plus Counter.outlive) when the group is deleted."""
    keys = spread_keys(st, "ctr", 2)
    counter = b"ctr:stampede:version"
    await st.write("ctr", dict.fromkeys(keys, b"x"), versions="counter")
    assert await st.topology.execute(counter, "PEXPIRETIME", counter) == -1
    receipt = await st.delete("ctr", keys, versions="counter", grace=60)
    until = int(await st.topology.execute(counter, "PEXPIRETIME", counter))
    tombstone = int(await st.topology.execute(keys[0].encode(), "PEXPIRETIME", keys[0]))
    assert until == tombstone + 3_600_000 and receipt.version == 2
    await st.write("ctr", dict.fromkeys(keys, b"y"), versions="counter", ttl=60)
    assert int(await st.topology.execute(counter, "PEXPIRETIME", counter)) > until - 3_600_000


async def test_a_group_repair_leaves_a_transaction_that_is_still_committing_alone(
    st: Stampede,
) -> None:
    """T prepared at both keys, committed nowhere yet (its writer is between the
    rounds): a repair of the torn group does not restamp the keys under T, it reads
    again later; T then commits whole."""
    a, b = spread_keys(st, "undecided", 2)
    async with st.transaction() as tx:
        tx.set(a, b"a0")
        tx.set(b, b"b0")
    async with st.transaction() as tx:
        tx.set(b, b"b1")  # the group is torn: a and b hold different writes
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:t" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    before = [await raw_value(st, a), await raw_value(st, b)]
    result = await st.read("undecided", [a, b], retry=QUICK, repair=REBUILD)
    assert not result.consistent and result.repair is not None
    assert result.repair.action.value == "lost_race"
    assert [await raw_value(st, a), await raw_value(st, b)] == before
    commit = [(version, token, 0)] * 2
    assert await run_units(st.topology, COMMIT, raw, sides, commit, head=[5000]) == [1, 1]
    assert (await st.read_atomic([a, b])).values == {a: b"t", b: b"t"}


async def test_a_read_through_that_meets_an_undecided_transaction_repairs_nothing(
    st: Stampede,
) -> None:
    """A group not in Redis, read through a `Refetch(fills_missing=True)` while a
    transaction is prepared at its keys and committed nowhere yet: the repair leaves
    the group to that transaction, writes nothing and asks the loader nothing, and the
    result says so (not found, not repaired, `lost_race`, the keys it waits on named);
    it used to report `repaired=True` (`rolled_forward`) although nothing was written."""
    a, b = spread_keys(st, "undecided-rt", 2)
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:t" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    asked: list[bytes] = []

    async def load(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        asked.append(group)
        return dict.fromkeys(keys, b"from-db")

    result = await st.read(
        "undecided-rt", [a, b], retry=QUICK, repair=Refetch(load, fills_missing=True)
    )
    assert result.status is Status.NOT_FOUND and not result.repaired
    assert result.repair is not None and result.repair.action is RepairAction.LOST_RACE
    assert result.repair.detail.get("undecided") == f"{a}, {b}"
    assert asked == []
    assert [await raw_value(st, a), await raw_value(st, b)] == [None, None]
    commit = [(version, token, 0)] * 2
    assert await run_units(st.topology, COMMIT, raw, sides, commit, head=[5000]) == [1, 1]
    assert (await st.read_atomic([a, b])).values == {a: b"t", b: b"t"}


async def test_a_repair_completes_a_transaction_with_the_configured_version_grace(
    topology_env: tuple[str, Any],
) -> None:
    """A transaction committed at a only: the read's repair commits it at b, keeping
    what it replaces there (the version hash's expiry past the value's) for the
    client's `version_grace`, not a fixed 5 s."""
    async with open_stampede(topology_env[1], topology_env[0], version_grace=30) as st:
        a, b = spread_keys(st, "vgrace", 2)
        await st.write("vgrace", {a: b"a0", b: b"b0"})
        raw = [a.encode(), b.encode()]
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        at = int(time.time() * 1000) + 60_000
        sides = [side_key(k, st.topology.slot_of) for k in raw]
        env = b"%d:%s:t" % (version, token.encode())
        args = [(version, token, 0, at, env, encode_meta(raw))] * 2
        assert await run_units(st.topology, PREPARE, raw, sides, args, head=[20_000]) == [1, 1]
        commit = [(version, token, at)]
        assert await run_units(st.topology, COMMIT, raw[:1], sides[:1], commit, head=[30_000])
        result = await st.read("vgrace", [a, b], retry=QUICK, repair=REBUILD)
        assert result.consistent and result.values == {a: b"t", b: b"t"}
        kept = int(await st.topology.execute(sides[1], "PEXPIRETIME", sides[1]))
        assert kept - at >= 29_000


async def test_a_one_slot_group_write_with_a_refused_key_writes_nothing(st: Stampede) -> None:
    """The same rule for group writes: a one-slot write that one key refuses (another
    type) leaves every other key, and the commit record, untouched."""
    await st.topology.execute(b"g1:{aon}:b", "RPUSH", "g1:{aon}:b", "x")
    for mode in ("stamp", "commit"):
        with pytest.raises((InvalidKeyError, PartialWriteError), match="WRONGTYPE"):
            await st.write("g1:{aon}", {"g1:{aon}:a": b"1", "g1:{aon}:b": b"2"}, mode=mode)
        assert await raw_value(st, "g1:{aon}:a") is None
        assert await raw_value(st, "g1:{aon}:stampede:commit") is None


# -- 10. eviction: missing, or an honest error; never fractured, never back ---------


@pytest.mark.parametrize("evicted", ["pending-hash", "committed-hash", "tombstone", "data"])
async def test_evicted_keys_read_as_missing_or_raise_never_fractured(
    st: Stampede, evicted: str
) -> None:
    """What maxmemory eviction can remove (played with DEL): a transaction committed at
    B and pending at A, then A's or B's version hash evicted; a tombstone evicted; a
    data key evicted. read_atomic raises an honest error or reads the key as missing;
    it never returns B's new value beside A's old one, and never writes anything back."""
    a, b = spread_keys(st, f"evict-{evicted}", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    raw = [a.encode(), b.encode()]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    if evicted.endswith("hash"):
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        env = b"%d:%s:new" % (version, token.encode())
        args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
        assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
        commit = [(version, token, 0)]
        assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]
        side = sides[0] if evicted == "pending-hash" else sides[1]
        await st.topology.execute(side, "DEL", side)
        with pytest.raises(MixedWritersError):
            await st.read_atomic([a, b])
        return
    if evicted == "tombstone":
        async with st.transaction() as tx:
            tx.delete(a)
    await st.topology.execute(raw[0], "DEL", a)
    got = await st.read_atomic([a, b])
    assert got.values == {a: None, b: b"old"}
    assert await raw_value(st, a) is None


async def test_the_sweep_collects_a_commit_record_whose_keys_are_gone(quick: Stampede) -> None:
    """A commit-mode write with no TTL, then its keys deleted by a transaction (or a
    stamp-mode delete): once the tombstones expire the record vouches for nothing, and
    the sweep deletes it; a record whose keys live stays."""
    st = quick
    keys = spread_keys(st, "rec", 2)
    live = spread_keys(st, "live", 2)
    await st.write("rec", dict.fromkeys(keys, b"1"), mode="commit")
    await st.write("live", dict.fromkeys(live, b"1"), mode="commit")
    async with st.transaction() as tx:
        for key in keys:
            tx.delete(key)
    for key in keys:
        await gone(st, key)
    await sweep(st.topology, grace=0.05)
    assert await raw_value(st, "rec:stampede:commit") is None
    assert await raw_value(st, "live:stampede:commit") is not None


# -- found by the chaos edge scenarios (chaos/ramp_edge_causes.py F1-F5) -----------


async def _pending_at_first(st: Stampede, a: str, b: str, payload: bytes) -> tuple[int, str]:
    """A transaction over a and b, prepared at both and committed at b only."""
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:%s" % (version, token.encode(), payload)
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000]) == [1, 1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, raw[1:], sides[1:], commit, head=[5000]) == [1]
    return version, token


async def test_a_group_delete_over_a_pending_transaction_is_never_undone(
    quick: Stampede,
) -> None:
    """F1: st.delete of a key where a transaction is still pending: once the tombstone
    expires, neither a reader nor the sweep completes the older transaction there."""
    st = quick
    await _group_delete_over_pending(st, *spread_keys(st, "f1", 2))


async def _group_delete_over_pending(st: Stampede, a: str, b: str) -> None:
    """A transaction over a and b, pending at a; then a group delete of a (newer than
    the transaction): a reads as missing, before the sweep and after, and stays gone."""
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    await _pending_at_first(st, a, b, b"new")
    await st.delete(a, [a])
    await gone(st, a)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"new"}
    await sweep(st.topology, grace=0.05)
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"new"}
    assert await raw_value(st, a) is None


async def test_a_group_delete_of_a_key_with_empty_braces_is_never_undone(
    quick: Stampede,
) -> None:
    """F1 for a key with braces but no hash tag (`odd{}a`): its version hash has a name
    only the client can work out (`stampede:v:{<n>}:<key>`), so the guard cannot raise
    its floor in its own call; the client raises it right after. Once the tombstone
    expires, neither a reader nor the sweep completes the older transaction there."""
    await _group_delete_over_pending(quick, "f1{}a", "f1odd:b")


async def test_a_group_delete_under_a_hash_policy_is_never_undone(
    stampede_primaries: LocalPrimaries,
) -> None:
    """F1 over primaries hashed by a HashPolicy: `{<key>}:stampede:v:u`, the name the
    guard gives a key's version hash, is in another slot than `order:1:a` under the
    policy, so the client's hash is `stampede:v:{<n>}:order:1:a`, whose floor the guard
    never raised (it raised that of a hash nobody uses): once the tombstone expired, a
    reader completed the older transaction there, and the deleted key came back."""
    loose = FAST.model_copy(update={"check_identity": False})  # (the fixture's layout)
    async with stampede.connect(
        stampede_primaries.urls,
        connection=loose,
        hash_pattern=r"order:(?P<tag>\d+):",
        tombstone_grace=0.05,
        version_grace=0.05,
    ) as st:
        a, b = next(
            (f"order:{i}:a", f"order:{i + 1}:b")
            for i in range(64)
            if st.topology.shard_of(b"order:%d:a" % i)
            != st.topology.shard_of(b"order:%d:b" % (i + 1))
        )
        assert side_key(a.encode(), st.topology.slot_of).startswith(b"stampede:v:{")
        await _group_delete_over_pending(st, a, b)


async def test_a_hash_policy_that_hashes_stampedes_own_names_alike(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A HashPolicy hashing each key by its first segment hashes every marker
    `stampede:op:{<n>}:...` and every hash `stampede:v:{<n>}:<key>` by `stampede`: no n
    moved them into a key's slot, and update() and every transaction searched 4M names
    (15 s and more) before a RuntimeError. They then sit beside the key
    (`<key>:stampede:op:<id>`, `<key>:stampede:v`), hashed as the key is."""
    loose = FAST.model_copy(update={"check_identity": False})  # (the fixture's layout)
    async with stampede.connect(
        stampede_primaries.urls,
        connection=loose,
        hash_pattern=r"(?P<tag>[^:]+):",
        tombstone_grace=0.05,
        version_grace=0.05,
    ) as st:
        a, b = next(
            (f"p{i}:a", f"p{i + 1}:b")
            for i in range(64)
            if st.topology.shard_of(b"p%d:a" % i) != st.topology.shard_of(b"p%d:b" % (i + 1))
        )
        assert side_key(a.encode(), st.topology.slot_of) == a.encode() + b":stampede:v"
        receipt = await st.update("pinned", [a], lambda cur: {a: b"1"})
        assert receipt.atomic and (await st.read("pinned", [a])).values == {a: b"1"}
        await _group_delete_over_pending(st, a, b)
        with pytest.raises(InvalidKeyError, match="stampede's own keys"):  # a marker's name
            await st.write("pinned", {f"{a}:stampede:op:x": b"1"})


async def test_a_version_hash_of_another_type_fails_only_its_own_key(st: Stampede) -> None:
    """Another program's string at a key's version hash name: the guard's floor (an
    HGET there) raised WRONGTYPE after the call's writes, and the whole call was
    reported failed though every key was written. The guard leaves that floor to the
    client instead, whose call fails for that key alone: the other is acknowledged."""
    keys = ["{wt}:a", "{wt}:b"]
    await st.write("{wt}", dict.fromkeys(keys, b"old"))
    junk = b"{wt}:a:stampede:v"
    await st.topology.execute(junk, "SET", junk, b"another program's")
    with pytest.raises(PartialWriteError, match="WRONGTYPE") as info:
        await st.write("{wt}", dict.fromkeys(keys, b"new"))
    assert info.value.landed == [b"{wt}:b"] and list(info.value.failed) == [b"{wt}:a"]
    assert await st.topology.execute(junk, "GET", junk) == b"another program's"


async def test_a_resent_write_of_a_key_with_empty_braces_still_raises_its_floor(
    st: Stampede,
) -> None:
    """The guard leaves the floor of a key with braces but no tag to the client (it
    cannot name the key's version hash). When that call's reply is lost after it ran,
    the resend finds the write already there (SAME): the client raises the floor
    then too, so a transaction pending at or below the write stays superseded."""
    key = "resend{}a"
    async with st.transaction() as tx:  # the key has a version hash
        tx.set(key, b"1")
        tx.set("resend:b", b"1")
    raw, side = key.encode(), side_key(key.encode(), st.topology.slot_of)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    value = b"%d:%s:2" % (version, token.encode())
    stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": 0}
    (request,) = requests_for([raw], [value], [[0]], (), stamp)
    # the first call ran, its reply lost: the key holds the write, its floor is not up
    assert await st.topology.script(GUARD, [raw], list(request.argv)) == [10]
    assert await st.topology.execute(side, "HGET", side, "g") is None
    resent = await st.topology.write_guarded([raw], [value], **stamp)
    assert resent.results == {raw: GuardCode.SAME}
    floor = await st.topology.execute(side, "HGET", side, "g")
    assert floor == b"%d:%s" % (version, token.encode())


async def test_a_durable_write_of_a_key_with_empty_braces_waits_on_its_floor_too(
    st: Stampede,
) -> None:
    """A durable write whose key's floor the client raises (braces but no tag) sends
    that call with the write's `WAIT` as well, and the receipt counts the fewest
    replicas either reached: with none here (no replicas), the floor is up and the
    write is reported not durable."""
    key = "durable{}a"
    async with st.transaction() as tx:  # the key has a version hash
        tx.set(key, b"1")
        tx.set("durable:b", b"1")
    side = side_key(key.encode(), st.topology.slot_of)
    shard = st.topology.shard_of(key.encode())
    durable = Durability(replicas=1, timeout=0.01)
    await st.write("d", {key: b"1.5"}, durability=durable)  # its scripts loaded: no NOSCRIPT
    await st.topology.execute_on(shard, "CONFIG", "RESETSTAT")
    receipt = await st.write("d", {key: b"2"}, durability=durable)
    assert receipt.durable is False and set(receipt.replicas.values()) == {0}
    stats = await st.topology.execute_on(shard, "INFO", "commandstats")
    text = stats.decode() if isinstance(stats, bytes) else str(stats)
    waits = next(line for line in text.splitlines() if line.startswith("cmdstat_wait:"))
    assert waits.split("calls=")[1].split(",")[0] == "2"  # the write's, then the floor's
    floor = await st.topology.execute(side, "HGET", side, "g")
    assert floor == b"%d:%s" % (receipt.version, receipt.token.encode())


async def test_a_delete_committed_after_its_expiry_still_deletes(st: Stampede) -> None:
    """F2: a transaction's tombstone whose commit lands after its expiry instant: the
    older value goes too (the write happened, then expired); it does not stay visible."""
    a = "f2:{1}:a"
    async with st.transaction() as tx:
        tx.set(a, b"old")
    raw, side = a.encode(), side_key(a.encode(), st.topology.slot_of)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    env = b"%d:%s" % (version, token.encode())  # a tombstone
    args = [(version, token, 0, 1, env, encode_meta([raw]))]
    assert await run_units(st.topology, PREPARE, [raw], [side], args, head=[3_600_000]) == [1]
    commit = [(version, token, "")]
    assert await run_units(st.topology, COMMIT, [raw], [side], commit, head=[5000]) == [3]
    assert await raw_value(st, a) is None


async def test_round_two_never_returns_a_version_replaced_before_round_one(
    st: Stampede,
) -> None:
    """F4: T at a, replaced by a TTL'd value that expired; a new value lands between the
    two rounds: round 2 must not hand back T's old value (it was gone before the read)."""
    a, b = spread_keys(st, "f4", 2)
    async with st.transaction() as tx:
        tx.set(a, b"t")
        tx.set(b, b"t")
    first = tx.receipt
    assert first is not None
    async with st.transaction(ttl=0.05) as tx:
        tx.set(a, b"short")
    await gone(st, a)
    round1 = await st.topology.execute(b"f4", "TIME")  # the read's first round, now
    t1 = int(round1[0]) * 1000 + int(round1[1]) // 1000 + 5000
    async with st.transaction() as tx:
        tx.set(a, b"later")  # lands between the rounds
    side = side_key(a.encode(), st.topology.slot_of)
    stamp = b"%d:%s" % (first.version, first.token.encode())
    (reply,) = await run_units(st.topology, ROUND2, [a.encode()], [side], [(stamp, t1)])
    assert reply[0] == b"g"


async def test_a_late_older_write_after_a_delete_reads_as_missing(
    topology_env: tuple[str, Any],
) -> None:
    """F5: T writes a and b, a is deleted and the tombstone runs out, then the late
    commit of a transaction older than T lands at a: by version order a is past T, so
    it reads as missing beside T's b, never as the older value (a fractured read)."""
    kind, env = topology_env
    async with open_stampede(env, kind, tombstone_grace=0.05) as st:
        await _late_older_write(st)


async def _late_older_write(st: Stampede) -> None:
    a, b = spread_keys(st, "f5", 2)
    raw, side = a.encode(), side_key(a.encode(), st.topology.slot_of)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    async with st.transaction() as tx:
        tx.set(a, b"t")
        tx.set(b, b"t")
    async with st.transaction() as tx:
        tx.delete(a)
    await gone(st, a)
    # A transaction stamped before T whose messages arrive only now (a slow writer).
    env = b"%d:%s:late" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta([raw]))]
    assert await run_units(st.topology, PREPARE, [raw], [side], args, head=[3_600_000]) == [1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, [raw], [side], commit, head=[5000]) == [1]
    assert (await st.read_atomic([a, b])).values == {a: None, b: b"t"}


async def test_a_lost_version_reads_as_missing_and_is_counted(st: Stampede) -> None:
    """A key holding an older value with no record of its sibling's transaction (lost
    in a failover, evicted): read as missing, counted and logged, not an error on
    every read from then on."""
    a, b = spread_keys(st, "lost", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
    async with st.transaction() as tx:
        tx.set(b, b"old")
    version, token = await _pending_at_first(st, a, b, b"new")
    side = side_key(a.encode(), st.topology.slot_of)
    stamp = b"%d:%s" % (version, token.encode())
    await st.topology.execute(side, "HDEL", side, b"d:" + stamp, b"m:" + stamp)
    before = metrics.REGISTRY.get_sample_value("stampede_lost_versions_total") or 0
    for _ in range(2):
        assert (await st.read_atomic([a, b])).values == {a: None, b: b"new"}
    after = metrics.REGISTRY.get_sample_value("stampede_lost_versions_total")
    assert after == before + 2


async def test_a_pending_key_is_completed_after_every_sibling_moved_on(st: Stampede) -> None:
    """F3: committed at b, pending at a; then b is rewritten by a newer transaction, so
    no sibling holds it any more. The sweep still completes it at a (b's version hash
    marks that the commit reached it): an acknowledged write is not lost."""
    a, b = spread_keys(st, "f3", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    version, token = await _pending_at_first(st, a, b, b"new")
    async with st.transaction() as tx:
        tx.set(b, b"newer")
    await sweep(st.topology)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token, stored.payload) == (version, token, b"new")


async def test_a_pending_key_is_completed_from_the_older_marks(st: Stampede) -> None:
    """F3 once b was rewritten 20 times more: the commit's token has moved from the
    newest marks (`t`, 16 at most) to the older ones (`u`), where the sweep finds it."""
    a, b = spread_keys(st, "f3u", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    version, token = await _pending_at_first(st, a, b, b"new")
    for n in range(20):
        async with st.transaction() as tx:
            tx.set(b, b"newer %d" % n)
    side = side_key(b.encode(), st.topology.slot_of)
    recent, older = await st.topology.execute(side, "HMGET", side, "t", "u")
    assert token.encode() not in recent and token.encode() in older
    await sweep(st.topology)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token, stored.payload) == (version, token, b"new")


async def test_commit_marks_of_another_shape_are_started_afresh(st: Stampede) -> None:
    """The commit marks (the version hash's field `t`) are 26-byte tokens; a value of
    another shape there (another program's) is replaced by a log that starts with
    the next commit's token, which the sweep then finds: F3 again, with b's marks
    overwritten before the transaction commits there."""
    a, b = spread_keys(st, "f3c", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    assert tx.receipt is not None
    side = side_key(b.encode(), st.topology.slot_of)
    assert await st.topology.execute(side, "HGET", side, "t") == tx.receipt.token.encode()
    await st.topology.execute(side, "HSET", side, "t", b"not a log of tokens")
    version, token = await _pending_at_first(st, a, b, b"new")
    assert await st.topology.execute(side, "HGET", side, "t") == token.encode()
    async with st.transaction() as tx:
        tx.set(b, b"newer")
    assert tx.receipt is not None
    log = await st.topology.execute(side, "HGET", side, "t")
    assert log == token.encode() + tx.receipt.token.encode()
    await sweep(st.topology)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token, stored.payload) == (version, token, b"new")


async def test_commit_marks_written_before_they_moved_are_still_evidence(st: Stampede) -> None:
    """A version hash written before the commit marks moved to `t` holds them in `c`
    (48-byte records): the sweep still reads them, so F3 completes from them."""
    a, b = spread_keys(st, "f3l", 2)
    async with st.transaction() as tx:
        tx.set(a, b"old")
        tx.set(b, b"old")
    version, token = await _pending_at_first(st, a, b, b"new")
    async with st.transaction() as tx:
        tx.set(b, b"newer")
    side = side_key(b.encode(), st.topology.slot_of)
    await st.topology.execute(side, "HDEL", side, "t")
    await st.topology.execute(side, "HSET", side, "c", mark_record((version, token)))
    await sweep(st.topology)
    stored = Envelope.decode(await raw_value(st, a) or b"")
    assert (stored.version, stored.token, stored.payload) == (version, token, b"new")


async def test_a_version_superseded_here_is_never_completed_later(st: Stampede) -> None:
    """An older transaction still pending at a key when a newer one with a short TTL
    commits there: once the newer value expires, completing the older one must not
    bring an older value back (it was marked superseded when the newer one landed)."""
    a = "sup:{1}:a"
    raw, side = a.encode(), side_key(a.encode(), st.topology.slot_of)
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    env = b"%d:%s:older" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta([raw, b"sup:{2}:b"]))]
    assert await run_units(st.topology, PREPARE, [raw], [side], args, head=[3_600_000]) == [1]
    async with st.transaction(ttl=0.05) as tx:
        tx.set(a, b"newer")
    await gone(st, a)
    commit = [(version, token, "")]
    assert await run_units(st.topology, COMMIT, [raw], [side], commit, head=[5000]) == [0]
    assert await raw_value(st, a) is None


class HeldUpPrepare(DelegatingTopology):
    """Runs `meanwhile` before the first PREPARE goes out (a prepare held up between
    drawing its version and reaching Redis: failover resends, a slow shard)."""

    def __init__(self, inner: Any, meanwhile: Any) -> None:
        super().__init__(inner)
        self.meanwhile = meanwhile

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha == PREPARE.sha and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return await self.inner.script(script, keys, args)


async def test_a_late_prepare_meeting_a_newer_transaction_is_superseded_not_a_clock_skew(
    quick: Any,
) -> None:
    """A transaction held up past max_offset before its prepare, while another (with the
    same honest clock) committed the same keys: judged against the clock when it lands,
    the newer version is no skew. The late transaction commits, kept out by the newer
    one (superseded), instead of raising ClockSkewError."""
    st = quick
    keys = spread_keys(st, "lateprep", 3)
    now = [time.time_ns()]

    async def newer_meanwhile() -> None:
        now[0] += 7 * 10**9  # held up for 7 s
        async with Transaction(
            st.topology,
            versions=HybridClock(clock=lambda: now[0]),
            ttl=None,
            grace=5.0,
            tombstone_grace=300.0,
            timeout=10.0,
        ) as newer:
            for key in keys:
                newer.set(key, b"newer")

    late = Transaction(
        HeldUpPrepare(st.topology, newer_meanwhile),
        versions=HybridClock(clock=lambda: now[0], max_offset=5.0),
        ttl=None,
        grace=5.0,
        tombstone_grace=300.0,
        timeout=10.0,
    )
    for key in keys:
        late.set(key, b"late")
    receipt = await late.commit()
    assert set(receipt.superseded) == {k.encode() for k in keys}
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"newer")


async def test_read_atomic_names_a_key_of_another_type(st: Stampede) -> None:
    """A key holding a list (another program's) is refused by name, as a transaction
    refuses it (`InvalidKeyError`), not with the read script's raw WRONGTYPE error;
    the keys read beside it do not matter."""
    tx = st.transaction()
    tx.set("rt:{1}:a", b"1")
    tx.set("rt:{1}:b", b"2")
    await tx.commit()
    await st.topology.execute(b"rt:{1}:a", "DEL", b"rt:{1}:a")
    await st.topology.execute(b"rt:{1}:a", "RPUSH", b"rt:{1}:a", b"theirs")
    with pytest.raises(InvalidKeyError) as refused:
        await st.read_atomic(["rt:{1}:b", "rt:{1}:a"])
    assert refused.value.key == b"rt:{1}:a"
    assert "WRONGTYPE" in str(refused.value) and "rt:{1}:a" in str(refused.value)
