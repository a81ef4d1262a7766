"""The index of a version hash (fields `p` and `i`): a commit reads it in place of the
whole hash, so it must say exactly what the hash holds, whatever mix of transactions,
prepares left behind, late commits, deletes, group writes and sweeps went before; and
a hash without one (or with another program's values there) is read whole, never
trusted. Every test runs on both topologies."""

from __future__ import annotations

import random
from typing import Any

import pytest

from stampede import Stampede
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.sweep import sweep
from stampede._txn.write import run_units
from stampede.wire import new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import gone, raw_value, spread_keys

PAD, MARK = 47, 61


def _stamp(pad: bytes) -> bytes:
    return b"%d:%s" % (int(pad[:20]), pad[21:])


async def _assert_mirrors(st: Stampede, key: str) -> None:
    """The index of `key`'s version hash names exactly its unmarked versions (`m:`
    without `x:`) and its marked ones (`x:`, with the mark's time), each once, the
    marked in the order they were marked."""
    side = side_key(key.encode(), st.topology.slot_of)
    flat = await st.topology.execute(side, "HGETALL", side)
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    if not fields:
        return
    p, i = fields[b"p"], fields[b"i"]
    assert len(p) % PAD == 0 and len(i) % MARK == 0, (p, i)
    unmarked = [_stamp(p[j : j + PAD]) for j in range(0, len(p), PAD)]
    marks = [
        (_stamp(i[j : j + PAD]), i[j + PAD : j + PAD + 1], int(i[j + PAD + 1 : j + MARK]))
        for j in range(0, len(i), MARK)
    ]
    metas = {f[2:] for f in fields if f.startswith(b"m:")}
    marked = {f[2:]: int(v) for f, v in fields.items() if f.startswith(b"x:")}
    assert sorted(unmarked) == sorted(metas - set(marked)), key
    assert len(set(unmarked)) == len(unmarked)
    assert {s: t for s, _, t in marks} == marked and len(marks) == len(marked), key
    assert {kind for _, kind, _ in marks} <= {b"x"}
    times = [t for _, _, t in marks]
    assert times == sorted(times)


async def _prepare(st: Stampede, keys: list[str], version: int, payload: bytes) -> str:
    raw = [k.encode() for k in keys]
    token = new_token()
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:%s" % (version, token.encode(), payload)
    args = [(version, token, 0, 0, env, encode_meta(raw))] * len(raw)
    await run_units(st.topology, PREPARE, raw, sides, args, head=[3_600_000])
    return token


async def _commit(st: Stampede, keys: list[str], version: int, token: str) -> list[Any]:
    raw = [k.encode() for k in keys]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    args = [(version, token, "")] * len(raw)
    return await run_units(st.topology, COMMIT, raw, sides, args, head=[5000])


async def test_the_index_mirrors_the_hash_through_a_seeded_workload(st: Stampede) -> None:
    """Transactions (sets, deletes, expiring values), prepares left behind with older
    and newer versions, their late commits at some keys, group writes and sweeps, in
    a fixed random order: after every step each key's index says what its hash holds."""
    rng = random.Random(20261126)
    keys = spread_keys(st, "vix", 4)
    left: list[tuple[list[str], int, str]] = []
    for step in range(160):
        op = rng.choice(["txn", "txn", "txn", "delete", "group", "prepare", "late", "sweep"])
        chosen = rng.sample(keys, rng.randint(1, len(keys)))
        if op == "txn":
            async with st.transaction(ttl=rng.choice([None, None, 30.0])) as tx:
                for key in chosen:
                    tx.set(key, b"t%d" % step)
        elif op == "delete":
            async with st.transaction() as tx:
                tx.delete(chosen[0])
        elif op == "group":
            await st.write("vix:group", {key: b"g%d" % step for key in chosen})
        elif op == "prepare":
            version = st.versions.now() - rng.choice([0, 0, 2 * 10**9])  # type: ignore[attr-defined]
            left.append((chosen, version, await _prepare(st, chosen, version, b"p%d" % step)))
        elif op == "late" and left:
            prepared, version, token = left.pop(rng.randrange(len(left)))
            await _commit(st, rng.sample(prepared, rng.randint(1, len(prepared))), version, token)
        elif op == "sweep":
            await sweep(st.topology, grace=rng.choice([0.0, 5.0]))
        for key in keys:
            await _assert_mirrors(st, key)


@pytest.mark.parametrize("index", ["absent", "another shape"])
async def test_a_hash_without_an_index_is_read_whole_by_its_next_commit(
    st: Stampede, index: str
) -> None:
    """A version hash with no index (written before there was one), or with values of
    another shape in its fields: a transaction prepared there before a newer one
    commits is still marked superseded by that commit, so once the newer value
    expires its late commit brings nothing back; and the hash is indexed after."""
    a = "vix:{legacy}:a"
    side = side_key(a.encode(), st.topology.slot_of)
    async with st.transaction() as tx:
        tx.set(a, b"first")
    if index == "absent":
        await st.topology.execute(side, "HDEL", side, "p", "i")
    else:
        await st.topology.execute(side, "HSET", side, "p", "not an index", "i", "nor this")
    older = st.versions.now()  # type: ignore[attr-defined]
    token = await _prepare(st, [a, "vix:{legacy}:b"], older, b"older")
    async with st.transaction(ttl=0.05) as tx:
        tx.set(a, b"newer")
    await _assert_mirrors(st, a)
    await gone(st, a)
    assert await _commit(st, [a], older, token) == [0]
    assert await raw_value(st, a) is None
    await _assert_mirrors(st, a)


async def test_past_eight_marked_versions_the_earliest_marked_go_first(st: Stampede) -> None:
    """Twelve commits of one key: the eight versions replaced last are kept (with their
    envelopes, for readers that need them), the four replaced first are gone."""
    a = "vix:{kept}:a"
    side = side_key(a.encode(), st.topology.slot_of)
    stamps = []
    for n in range(12):
        async with st.transaction() as tx:
            tx.set(a, b"%d" % n)
        assert tx.receipt is not None
        stamps.append(b"%d:%s" % (tx.receipt.version, tx.receipt.token.encode()))
    flat = await st.topology.execute(side, "HGETALL", side)
    fields = set(flat[::2])
    assert {f[2:] for f in fields if f.startswith(b"x:")} == set(stamps[3:11])
    assert {f[2:] for f in fields if f.startswith(b"d:")} == set(stamps[3:11])
    assert b"m:" + stamps[11] in fields
    await _assert_mirrors(st, a)
