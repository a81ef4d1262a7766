"""Read-atomic transactions (RAMP-Fast on Redis), on real servers, both topologies."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from stampede import Envelope, InvalidKeyError, ReadError, Stampede, TransactionAborted
from stampede._lua import Script
from stampede._txn import read_atomic
from stampede._txn.read import required_versions
from stampede._txn.scripts import COMMIT, PREPARE, ROUND2
from stampede._txn.sweep import sweep
from stampede._txn.write import run_units
from stampede.errors import ConfigurationError
from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker
from stampede.results import AtomicRead
from stampede.testing.faults import DelegatingTopology
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import eventually, open_stampede, spread_keys


async def test_a_transaction_over_shards_reads_whole_in_one_round(st: Stampede) -> None:
    """Keys on several shards, written together, read together in one round; the data
    keys hold plain envelopes, so a raw GET still works."""
    keys = spread_keys(st, "tx", 3)
    async with st.transaction() as tx:
        for i, key in enumerate(keys):
            tx.set(key, b"v%d" % i)
    receipt = tx.receipt
    assert receipt is not None and not receipt.atomic and receipt.pending == ()
    got = await st.read_atomic(keys)
    assert got.rounds == 1 and got.values == {k: b"v%d" % i for i, k in enumerate(keys)}
    raw = await st.topology.execute(keys[0].encode(), "GET", keys[0])
    assert Envelope.decode(raw).payload == b"v0" and Envelope.decode(raw).token == receipt.token


async def test_one_slot_transaction_is_one_atomic_call(st: Stampede) -> None:
    """Keys sharing a hash tag commit in one server-side step."""
    async with st.transaction() as tx:
        tx.set("acct:{7}:a", b"1")
        tx.set("acct:{7}:b", b"2")
    assert tx.receipt is not None and tx.receipt.atomic
    got = await st.read_atomic(["acct:{7}:a", "acct:{7}:b"])
    assert got.values == {"acct:{7}:a": b"1", "acct:{7}:b": b"2"} and got.rounds == 1


async def test_an_exception_in_the_block_sends_nothing(st: Stampede) -> None:
    """Leaving the block with an exception aborts: nothing reaches Redis."""
    keys = spread_keys(st, "abort", 2)
    with pytest.raises(RuntimeError):
        async with st.transaction() as tx:
            tx.set(keys[0], b"x")
            raise RuntimeError("changed my mind")
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys)
    with pytest.raises(ConfigurationError, match="ended"):
        tx.set(keys[1], b"y")


async def test_delete_in_a_transaction_reads_as_none(st: Stampede) -> None:
    """tx.delete writes a tombstone: read_atomic gives None, its siblings stay whole."""
    keys = spread_keys(st, "txd", 2)
    async with st.transaction() as tx:
        tx.set(keys[0], b"a")
        tx.set(keys[1], b"b")
    async with st.transaction() as tx:
        tx.delete(keys[0])
        tx.set(keys[1], b"b2")
    assert tx.receipt is not None and tx.receipt.deleted == (keys[0].encode(),)
    assert (await st.read_atomic(keys)).values == {keys[0]: None, keys[1]: b"b2"}


async def _half_committed(st: Stampede, keys: list[str], payload: bytes) -> tuple[int, str]:
    """A writer that prepared every key, committed the first, and died."""
    raw = [k.encode() for k in keys]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:%s" % (version, token.encode(), payload)
    meta = encode_meta(raw)
    prepared = await run_units(
        st.topology, PREPARE, raw, sides, [(version, token, 0, 0, env, meta)] * len(raw),
        head=[3_600_000],
    )  # fmt: skip
    assert prepared == [1] * len(raw)
    done = await run_units(
        st.topology, COMMIT, raw[:1], sides[:1], [(version, token, 0)], head=[5000]
    )
    assert done == [1]
    return version, token


async def test_a_writer_that_died_mid_commit_is_completed_by_the_reader(st: Stampede) -> None:
    """Committed on one key only: a read sees the whole transaction (second round), and
    completes the commit so that plain GETs see it too."""
    keys = spread_keys(st, "dead", 3)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    _, token = await _half_committed(st, keys, b"new")
    got = await st.read_atomic(keys)
    assert got.rounds == 2 and got.values == dict.fromkeys(keys, b"new")
    for key in keys:
        stored = Envelope.decode(await st.topology.execute(key.encode(), "GET", key))
        assert stored.token == token
    assert (await st.read_atomic(keys)).rounds == 1


async def test_prepared_but_never_committed_is_invisible(st: Stampede) -> None:
    """A writer that died before committing anywhere leaves nothing a reader sees."""
    keys = spread_keys(st, "ghost", 2)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    raw = [k.encode() for k in keys]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:ghost" % (version, token.encode())
    await run_units(
        st.topology, PREPARE, raw, sides, [(version, token, 0, 0, env, encode_meta(raw))] * 2,
        head=[3_600_000],
    )  # fmt: skip
    got = await st.read_atomic(keys)
    assert got.rounds == 1 and got.values == dict.fromkeys(keys, b"old")


class _BeforeRoundTwo(DelegatingTopology):
    """Runs `before(pairs, args)` just ahead of each ROUND2 call it passes on."""

    def __init__(self, inner: Any, before: Any) -> None:
        super().__init__(inner)
        self.before = before

    async def script(self, script: Script, keys: Any, args: Any) -> Any:
        if script.sha == ROUND2.sha:
            await self.before(keys, args)
        return await self.inner.script(script, keys, args)


@pytest.mark.parametrize("attempts", [1, 2])
async def test_a_version_collected_between_the_rounds_reads_again_then_raises(
    st: Stampede, attempts: int
) -> None:
    """transactions.md, grace window: a read whose key was rewritten between its two
    rounds, the version it needed collected meanwhile, starts again (and then reads the
    newer value whole), up to `attempts` times, then raises ReadError saying so."""
    keys = spread_keys(st, f"collected{attempts}", 2)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    await _half_committed(st, keys, b"mid")  # keys[0] holds it; keys[1] has it prepared

    async def rewrite(pairs: Any, args: Any) -> None:
        key, side = pairs[0], pairs[1]
        async with st.transaction() as tx:
            tx.set(key, b"new")
        await st.topology.execute(side, "HDEL", side, b"d:" + bytes(args[0]))  # collected

    faulty = _BeforeRoundTwo(st.topology, rewrite)
    if attempts == 1:
        with pytest.raises(ReadError, match="rewritten between the read's two rounds"):
            await read_atomic(faulty, keys, attempts=1)
        return
    got = await read_atomic(faulty, keys, attempts=2)
    assert got.attempts == 2 and got.values == {keys[0]: b"mid", keys[1]: b"new"}


class _SlowPrepares(DelegatingTopology):
    """Answers each PREPARE call only after `delay` seconds."""

    def __init__(self, inner: Any, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay

    async def script(self, script: Script, keys: Any, args: Any) -> Any:
        reply = await self.inner.script(script, keys, args)
        if script.sha == PREPARE.sha:
            await asyncio.sleep(self.delay)
        return reply


async def test_prepares_slower_than_the_transaction_timeout_abort(quick: Stampede) -> None:
    """transactions.md, failures: prepares that take longer than transaction_timeout
    (0.3 s here) abort the transaction before anything is committed."""
    keys = spread_keys(quick, "slowprep", 2)
    async with quick.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    tx = quick.transaction()
    tx._topology = _SlowPrepares(quick.topology, 0.4)  # noqa: SLF001 - a slow topology
    for key in keys:
        tx.set(key, b"new")
    with pytest.raises(TransactionAborted, match="longer than the transaction timeout"):
        await tx.commit()
    assert tx.receipt is None
    got = await quick.read_atomic(keys)
    assert got.rounds == 1 and got.values == dict.fromkeys(keys, b"old")


async def test_a_commit_inside_the_block_is_not_reported_as_an_error_at_its_end(
    st: Stampede,
) -> None:
    """`await tx.commit()` inside `async with st.transaction() as tx:` commits once; the
    block's end does not commit again (it raised ConfigurationError "this transaction
    has ended" after a commit that had succeeded, as if it had not)."""
    keys = spread_keys(st, "inner", 2)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"v")
        receipt = await tx.commit()
    assert tx.receipt is receipt and receipt.pending == ()
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"v")
    with pytest.raises(ConfigurationError, match="has ended"):
        tx.set(keys[0], b"w")


async def test_counter_versions_are_refused_for_transactions(st: Stampede) -> None:
    """A per-group counter cannot order writes across keys."""
    with pytest.raises(ConfigurationError, match="ordered across keys"):
        st.transaction(versions="counter")  # type: ignore[arg-type]


def test_required_versions_is_ramp_fasts_second_round() -> None:
    """A key older than a returned sibling's transaction is fetched at that stamp."""
    a, b, c = b"a", b"b", b"c"
    t1 = Envelope(10, "01JD0000000000000000000000", b"1")
    t2 = Envelope(20, "01JD0000000000000000000001", b"2")
    sib = frozenset({a, b})
    assert required_versions([a, b, c], [t2, t1, None], [sib, sib, None]) == {1: (20, t2.token)}
    assert required_versions([a, b], [t2, t2], [sib, sib]) == {}
    assert required_versions([a, b], [t1, None], [sib, None]) == {1: (10, t1.token)}


async def test_storage_returns_to_one_version_after_the_grace_window(
    topology_env: tuple[str, Any],
) -> None:
    """Under sustained writes the version hash keeps old versions only for the grace
    window: after it, the sweep leaves each key's current version's metadata alone."""
    kind, env = topology_env
    async with open_stampede(env, kind, version_grace=0.05) as st:
        keys = spread_keys(st, "gc", 2)
        for i in range(30):
            async with st.transaction() as tx:
                for key in keys:
                    tx.set(key, b"%d" % i)
        async with st.transaction() as tx:
            for key in keys:
                tx.set(key, b"last")
        await asyncio.sleep(0.2)
        assert await sweep(st.topology, grace=0.05) >= 2
        for key in keys:
            side = side_key(key.encode(), st.topology.slot_of)
            fields = await st.topology.execute(side, "HKEYS", side)
            # k: the data key's name; t, u: the marks of commit decisions (the sweep's);
            # p, i: the index of its versions
            versions = [f for f in fields if f not in (b"k", b"t", b"u", b"p", b"i")]
            assert len(versions) == 1 and versions[0].startswith(b"m:"), fields


async def test_a_hot_keys_version_hash_stays_bounded(
    topology_env: tuple[str, Any],
) -> None:
    """A key rewritten by 100 transactions keeps at most 8 replaced versions, and its
    commit marks as tokens in two fields (`u` then `t`, at most 16 in `t`): at most 80,
    among them the 64 last, in the order they came, cut back in bulk."""
    kind, env = topology_env
    async with open_stampede(env, kind) as st:
        keys = spread_keys(st, "hotv", 2)
        stamps = []
        for i in range(100):
            async with st.transaction() as tx:
                for key in keys:
                    tx.set(key, b"%d" % i)
            assert tx.receipt is not None
            stamps.append((tx.receipt.version, tx.receipt.token))
        for key in keys:
            side = side_key(key.encode(), st.topology.slot_of)
            fields = await st.topology.execute(side, "HGETALL", side)
            hashed = dict(zip(fields[::2], fields[1::2], strict=True))
            assert len(hashed[b"t"]) <= 16 * 26
            log = hashed[b"u"] + hashed[b"t"]
            records = [log[i : i + 26].decode() for i in range(0, len(log), 26)]
            assert 64 <= len(records) <= 80, len(records)
            tokens = [token for _, token in stamps]
            assert records == tokens[len(tokens) - len(records) :]  # the last, in order
            replaced = [f for f in hashed if f.startswith(b"x:")]
            assert len(replaced) <= 8
            assert b"m:%d:%s" % (stamps[-1][0], stamps[-1][1].encode()) in hashed
            assert (await st.read_atomic([key])).values[key] == b"99"


def fractures(got: AtomicRead[str], wrote: dict[bytes, list[str]]) -> list[str]:
    """Keys of the read whose value's transaction also wrote another key of the read
    that came back older (a fractured read), judged from payloads and stamps only."""
    out = []
    for key, value in got.values.items():
        mine = got.stamps[key]
        for other in wrote.get(value or b"", []):
            theirs = got.stamps.get(other, mine) if other in got.values else mine
            if other != key and (theirs is None or mine is None or theirs < mine):
                out.append(f"{key}={value!r} but {other} is older")
    return out


async def test_no_fractured_read_under_racing_and_cancelled_writers(
    topology_env: tuple[str, Any],
) -> None:
    """Transactions over random subsets of 12 keys on every shard, some writers
    cancelled mid-transaction, readers reading random subsets: no read returns a
    transaction's value for one key with an older value for another key it wrote."""
    kind, env = topology_env
    rng = random.Random(1411)
    async with open_stampede(env, kind) as st:
        keys = [f"ra:{i}" for i in range(12)]
        stamps: dict[bytes, tuple[int, str]] = {}  # payload -> its transaction's stamp
        wrote: dict[bytes, list[str]] = {}
        violations: list[str] = []
        reads = 0

        async def writer(n: int) -> None:
            for i in range(25):
                chosen = rng.sample(keys, rng.randint(2, 6))
                payload = b"w%d.%d" % (n, i)
                tx = st.transaction()
                for key in chosen:
                    tx.set(key, payload)
                wrote[payload] = chosen
                task = asyncio.ensure_future(tx.commit())
                if rng.random() < 0.2:
                    await asyncio.sleep(rng.random() * 0.002)
                    task.cancel()
                try:
                    receipt = await task
                    stamps[payload] = (receipt.version, receipt.token)
                except asyncio.CancelledError:
                    pass

        async def reader() -> None:
            nonlocal reads
            for _ in range(60):
                got = await st.read_atomic(rng.sample(keys, rng.randint(2, 8)))
                reads += 1
                violations.extend(fractures(got, wrote))

        await asyncio.gather(*(writer(n) for n in range(4)), *(reader() for _ in range(3)))
        assert reads == 180 and violations == []


async def test_prepare_failure_aborts_and_nothing_is_visible(st: Stampede) -> None:
    """A key of another type refuses its prepare: the transaction aborts everywhere."""
    keys = spread_keys(st, "bad", 2)
    await st.topology.execute(keys[1].encode(), "RPUSH", keys[1], "x")
    with pytest.raises(InvalidKeyError, match="WRONGTYPE"):
        async with st.transaction() as tx:
            tx.set(keys[0], b"a")
            tx.set(keys[1], b"b")
    assert (await st.read_atomic(keys[:1])).values == {keys[0]: None}


async def test_the_worker_sweeps_version_hashes(topology_env: tuple[str, Any]) -> None:
    """The repair worker's periodic sweep collects versions kept past the grace window
    for keys that are no longer written."""
    kind, env = topology_env
    async with open_stampede(env, kind, version_grace=0.05) as st:
        keys = spread_keys(st, "swept", 2)
        for i in range(3):
            async with st.transaction() as tx:
                for key in keys:
                    tx.set(key, b"%d" % i)
        worker = Worker(
            st.topology,
            RepairQueue(st.topology),
            NewestWins(),
            sweep_interval=0.05,
            version_grace=0.05,
            poll_interval=0.01,
            block_ms=50,
        )
        running = asyncio.create_task(worker.run())

        async def collected() -> bool:
            for key in keys:
                side = side_key(key.encode(), st.topology.slot_of)
                fields = await st.topology.execute(side, "HKEYS", side)
                fields = [f for f in fields if f not in (b"t", b"u", b"p", b"i")]
                if [f for f in fields if f != b"k"] != [f for f in fields if f.startswith(b"m:")]:
                    return False
                if len([f for f in fields if f.startswith(b"m:")]) != 1:
                    return False
            return True

        try:
            await eventually(collected, within=10)
        finally:
            worker.stop()
            await running


async def test_the_sweep_rolls_forward_a_writer_that_died_mid_commit(st: Stampede) -> None:
    """Committed on one key only and never read since: the sweep commits the others,
    so plain GETs see the whole transaction too."""
    keys = spread_keys(st, "roll", 3)
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, b"old")
    _, token = await _half_committed(st, keys, b"new")
    assert await sweep(st.topology) >= len(keys)
    for key in keys:
        stored = Envelope.decode(await st.topology.execute(key.encode(), "GET", key))
        assert stored.token == token and stored.payload == b"new"
    got = await st.read_atomic(keys)
    assert got.rounds == 1 and got.values == dict.fromkeys(keys, b"new")
