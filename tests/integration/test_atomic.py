"""Atomic helpers for co-located keys: MULTI/EXEC, WATCH with retries, Lua scripts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import stampede
from stampede import (
    ConfigurationError,
    CrossSlotError,
    InvalidKeyError,
    InvalidValueError,
    ShardResponseError,
    Stampede,
    WriteConflict,
    atomic,
)
from stampede.testing import LocalPrimaries

PAIR = ["pair:{1}:left", "pair:{1}:right"]
APART = ["pair:1:left", "pair:2:right"]  # untagged: two different slots


async def exists(st: Stampede, keys: list[str]) -> int:
    """How many of `keys` exist, asked key by key."""
    return sum([await st.topology.execute(k.encode(), "EXISTS", k) for k in keys])


@pytest.mark.parametrize(
    ("command", "keys"),
    [
        (("SET", "a", 1), [b"a"]),
        (("hincrby", b"h", "f", 1), [b"h"]),
        (("DEL", "a", "b"), [b"a", b"b"]),
        (("MSET", "a", 1, "b", 2), [b"a", b"b"]),
        (("RPOPLPUSH", "a", "b"), [b"a", b"b"]),
        (("EVALSHA", "f" * 40, 2, "a", "b", "arg"), [b"a", b"b"]),
        (("ZUNIONSTORE", "d", 2, "a", "b", "WEIGHTS", 1, 2), [b"d", b"a", b"b"]),
        (("HSTRLEN", "h", "f"), None),
    ],
)
def test_keys_of_known_commands(command: tuple[Any, ...], keys: list[bytes] | None) -> None:
    """`keys_of` finds the keys of known commands and answers None for unknown ones."""
    assert atomic.keys_of(command) == keys


async def test_cross_slot_multi_fails_before_sending(st: Stampede) -> None:
    """A MULTI over two slots raises CrossSlotError naming both keys and slots; nothing lands."""
    with pytest.raises(CrossSlotError) as info:
        await atomic.multi(st, [("SET", APART[0], 1), ("SET", APART[1], 1)])
    assert info.value.slots == {k.encode(): stampede.keyslot(k) for k in APART}
    for key in APART:
        assert str(stampede.keyslot(key)) in str(info.value) and key in str(info.value)
    assert await exists(st, APART) == 0


async def test_cross_slot_is_refused_without_any_connection() -> None:
    """The slot check runs before any I/O: unreachable servers still give CrossSlotError."""
    dead = stampede.connect([f"redis://127.0.0.1:{p}" for p in (1, 2, 3)])
    script = atomic.script("return 1", name="noop")
    with pytest.raises(CrossSlotError):
        await atomic.multi(dead, [("INCR", APART[0]), ("INCR", APART[1])])
    with pytest.raises(CrossSlotError):
        await atomic.watch(dead, APART, lambda tx: None)
    with pytest.raises(CrossSlotError):
        await script(dead, keys=APART)
    # So do the checks of the input itself (docs/patterns.md): an argument Redis
    # cannot take was found only once a connection was made (ShardUnavailable here).
    bad: list[object] = [None, {}]
    for arg in bad:
        with pytest.raises(InvalidValueError, match=r"argument 2 of SET must be bytes"):
            await atomic.multi(dead, [("SET", PAIR[0], arg)])
    with pytest.raises(InvalidValueError, match=r"args\[0\] of Lua noop must be bytes"):
        await script(dead, keys=PAIR[:1], args=[None])
    await dead.aclose()


async def test_tagged_multi_runs_atomically(st: Stampede) -> None:
    """With a shared hash tag the same block runs in one MULTI/EXEC and returns its replies."""
    replies = await atomic.multi(
        st, [("SET", PAIR[0], 10), ("INCRBY", PAIR[1], 5), ("MGET", *PAIR)]
    )
    assert replies == [True, 5, [b"10", b"5"]]


async def test_multi_accepts_a_topology(st: Stampede) -> None:
    """The helpers take a bare Topology as well as a Stampede."""
    await atomic.multi(st.topology, [("SET", PAIR[0], "x")])
    assert await st.topology.execute(PAIR[0].encode(), "GET", PAIR[0]) == b"x"


async def test_unknown_command_needs_explicit_keys(st: Stampede) -> None:
    """A command stampede cannot read keys from needs keys=[...]; with them it runs."""
    await atomic.multi(st, [("HSET", PAIR[0], "f", "abc")])
    with pytest.raises(InvalidKeyError, match="HSTRLEN"):
        await atomic.multi(st, [("HSTRLEN", PAIR[0], "f")])
    assert await atomic.multi(st, [("HSTRLEN", PAIR[0], "f")], keys=[PAIR[0]]) == [3]


async def test_failing_command_in_multi_names_the_shard(st: Stampede) -> None:
    """A command failing inside EXEC raises ShardResponseError naming its shard; the rest apply."""
    await atomic.multi(st, [("HSET", PAIR[0], "f", "v")])
    with pytest.raises(ShardResponseError, match="WRONGTYPE") as info:
        await atomic.multi(st, [("INCR", PAIR[0]), ("SET", PAIR[1], "applied")])
    assert info.value.shard == st.topology.shard_of(PAIR[0].encode())
    assert await st.topology.execute(PAIR[1].encode(), "GET", PAIR[1]) == b"applied"


async def test_empty_multi_sends_nothing(st: Stampede) -> None:
    """No commands: no round trip, no error, an empty reply list."""
    assert await atomic.multi(st, []) == []


async def test_concurrent_pairs_never_seen_out_of_step(st: Stampede) -> None:
    """Concurrent MULTI blocks and Lua calls bump a pair; an observer never sees it torn."""
    bump = atomic.script(
        "redis.call('INCR', KEYS[1]); return redis.call('INCR', KEYS[2])", name="bump"
    )
    stop = asyncio.Event()
    looks = 0

    async def observer() -> None:
        nonlocal looks
        while not stop.is_set():
            ((left, right),) = await atomic.multi(st, [("MGET", *PAIR)])
            assert left == right, f"observer saw the pair out of step: {left!r} vs {right!r}"
            looks += 1
            await asyncio.sleep(0)

    async def writer(n: int) -> None:
        for i in range(25):
            if (n + i) % 2:
                await atomic.multi(st, [("INCR", PAIR[0]), ("INCR", PAIR[1])])
            else:
                await bump(st, keys=PAIR)

    watching = [asyncio.create_task(observer()) for _ in range(3)]
    await asyncio.gather(*(writer(n) for n in range(8)))
    stop.set()
    await asyncio.gather(*watching)
    assert looks > 0
    assert await st.topology.execute(PAIR[0].encode(), "MGET", *PAIR) == [b"200", b"200"]


async def test_observer_catches_unprotected_pairs(st: Stampede) -> None:
    """Control for the test above: bumped by two separate commands, the pair is seen torn."""
    stop = asyncio.Event()
    torn = 0

    async def observer() -> None:
        nonlocal torn
        while not stop.is_set():
            ((left, right),) = await atomic.multi(st, [("MGET", *PAIR)])
            torn += left != right
            await asyncio.sleep(0)

    async def writer() -> None:
        for _ in range(25):
            for key in PAIR:
                await st.topology.execute(key.encode(), "INCR", key)

    watching = [asyncio.create_task(observer()) for _ in range(3)]
    await asyncio.gather(*(writer() for _ in range(8)))
    stop.set()
    await asyncio.gather(*watching)
    assert torn > 0


async def test_watch_loses_no_increment(st: Stampede) -> None:
    """Twenty racing read-modify-writes under WATCH all count, and some had to retry."""
    await atomic.multi(st, [("MSET", PAIR[0], 100, PAIR[1], 0)])

    async def move(tx: atomic.Watched) -> list[atomic.Command]:
        left, right = await tx.mget(PAIR)
        assert left is not None and right is not None
        await asyncio.sleep(0.001)  # widen the race window
        return [("SET", PAIR[0], int(left) - 1), ("SET", PAIR[1], int(right) + 1)]

    results = await asyncio.gather(
        *(atomic.watch(st, PAIR, move, max_attempts=100) for _ in range(20))
    )
    assert await st.topology.execute(PAIR[0].encode(), "MGET", *PAIR) == [b"80", b"20"]
    assert all(r.written for r in results)
    assert max(r.attempts for r in results) > 1


async def test_watch_gives_up_with_write_conflict(st: Stampede) -> None:
    """A watch that loses every race raises WriteConflict after max_attempts, writing nothing."""
    calls = 0

    async def always_raced(tx: atomic.Watched) -> list[atomic.Command]:
        nonlocal calls
        calls += 1
        await tx.get(PAIR[0])
        await st.topology.execute(PAIR[0].encode(), "INCR", PAIR[0])  # another client
        return [("SET", PAIR[1], "mine")]

    with pytest.raises(WriteConflict, match="3 times") as info:
        await atomic.watch(st, PAIR, always_raced, max_attempts=3)
    assert info.value.attempts == 3 and calls == 3
    assert await exists(st, [PAIR[1]]) == 0


async def test_watch_function_may_decline(st: Stampede) -> None:
    """A watch function returning None writes nothing and reports written=False."""
    result = await atomic.watch(st, PAIR, lambda tx: None)
    assert not result.written and result.results == [] and result.attempts == 1


async def test_watch_commands_must_stay_in_the_slot(st: Stampede) -> None:
    """Commands that leave the watched slot raise CrossSlotError before EXEC; nothing lands."""
    with pytest.raises(CrossSlotError, match="watch"):
        await atomic.watch(st, PAIR, lambda tx: [("SET", PAIR[0], 1), ("SET", APART[1], 1)])
    assert await exists(st, [PAIR[0], APART[1]]) == 0


async def test_watch_reads_must_stay_in_the_slot(st: Stampede) -> None:
    """Reading a key of another slot inside watch() is refused: it could hit the wrong shard."""

    async def stray(tx: atomic.Watched) -> None:
        await tx.get(APART[1])

    with pytest.raises(CrossSlotError):
        await atomic.watch(st, PAIR, stray)


async def test_script_survives_a_flushed_script_cache(st: Stampede) -> None:
    """A registered script reloads itself (EVAL) on NOSCRIPT after SCRIPT FLUSH."""
    put = atomic.script("return redis.call('SET', KEYS[1], ARGV[1])", name="put")
    assert await put(st, keys=[PAIR[0]], args=["one"])
    for shard in st.topology.shard_names:
        await st.topology.execute_on(shard, "SCRIPT", "FLUSH")
    await put(st, keys=[PAIR[0]], args=["two"])
    assert await st.topology.execute(PAIR[0].encode(), "GET", PAIR[0]) == b"two"
    assert put.sha[:12] in repr(put) and "put" in repr(put)


async def test_script_error_names_the_shard(st: Stampede) -> None:
    """A Lua error comes back as ShardResponseError naming the shard that ran it."""
    boom = atomic.script("return redis.error_reply('out of stock')", name="boom")
    with pytest.raises(ShardResponseError, match="out of stock") as info:
        await boom(st, keys=[PAIR[0]])
    assert info.value.shard == st.topology.shard_of(PAIR[0].encode())


async def test_script_needs_a_key(st: Stampede) -> None:
    """A script called without keys cannot be routed: InvalidKeyError says to name them."""
    with pytest.raises(InvalidKeyError, match="names no key"):
        await atomic.script("return 1")(st, keys=[])


async def test_bad_input_is_refused_before_anything_is_sent(st: Stampede) -> None:
    """One str where a list of keys (or of args) belongs is refused, not read one key
    per character: a script given keys="aa" used to run on the key 'a'. A command that
    is no tuple, an empty one, a numkeys that is no count and an argument Redis cannot
    take are StampedeErrors naming the fix; nothing reaches the server."""
    rogue = "aa"  # as characters: the key 'a' twice, one slot
    write = atomic.script("return redis.call('SET', KEYS[1], ARGV[1])", name="put")
    one_list = r"must be a list, not one str; write \['aa'\]"
    with pytest.raises(InvalidKeyError, match=rf"the keys of Lua put {one_list}"):
        await write(st, keys=rogue, args=["x"])
    with pytest.raises(InvalidValueError, match=r"the args of Lua put must be a list, not one"):
        await write(st, keys=[PAIR[0]], args="10")
    with pytest.raises(InvalidKeyError, match=rf"the keys of watch\(\) {one_list}"):
        await atomic.watch(st, rogue, lambda tx: [("SET", "a", "x")])
    with pytest.raises(InvalidKeyError, match=rf"the keys of multi\(\) {one_list}"):
        await atomic.multi(st, [("HSTRLEN", "aa", "f")], keys=rogue)
    with pytest.raises(InvalidValueError, match=r"multi\(\) takes a list of command tuples"):
        await atomic.multi(st, "SET a x")  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match=r"a command must be a tuple .* got str 'SET'"):
        await atomic.multi(st, ("SET", "a", "x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match=r"returns None or a list of command tuples"):
        await atomic.watch(st, [PAIR[0]], lambda tx: "SET")  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidValueError, match="an empty command"):
        await atomic.multi(st, [()])
    with pytest.raises(InvalidKeyError, match=r"EVAL takes the number of its keys before them"):
        await atomic.multi(st, [("EVAL", "return 1", "x", PAIR[0])])
    with pytest.raises(InvalidValueError, match=r"must be bytes, str, int or float, got NoneType"):
        await atomic.multi(st, [("SET", PAIR[0], None)])
    with pytest.raises(ConfigurationError, match="max_attempts must be a whole number at least 1"):
        await atomic.watch(st, PAIR, lambda tx: None, max_attempts=0)
    assert await exists(st, ["a", "aa", *PAIR]) == 0


async def test_watch_refuses_a_write_through_tx_call(st: Stampede) -> None:
    """tx.call runs on the watched connection outside MULTI/EXEC: a write there ran once
    per attempt (and, touching a watched key, made every attempt lose: INCR applied
    max_attempts times, then WriteConflict). It is refused before it is sent; reads pass."""
    counter, flag = "calls:{1}:n", "calls:{1}:done"

    async def bump(tx: atomic.Watched) -> list[atomic.Command]:
        await tx.call("INCR", counter)
        return [("SET", flag, "1")]

    with pytest.raises(InvalidValueError, match=r"tx.call\('INCR'\) is not a read"):
        await atomic.watch(st, [counter], bump, max_attempts=5)
    assert await exists(st, [counter, flag]) == 0

    async def read_then_set(tx: atomic.Watched) -> list[atomic.Command]:
        assert await tx.call("STRLEN", counter) == 0
        assert await tx.call("MEMORY", "USAGE", counter) is None
        return [("SET", flag, "1")]

    assert (await atomic.watch(st, [counter], read_then_set)).attempts == 1


async def test_atomic_helpers_under_a_policy_that_hashes_first_segments(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A HashPolicy that hashes a key's first segment hashes every
    'stampede:op:{<n>}:...' marker alike: the marker search ran 4M policy hashes
    (tens of seconds, blocking the event loop) and raised RuntimeError for any other
    slot. The marker is now named after the key, lands in its slot, and expires."""
    async with stampede.connect(stampede_primaries.urls, hash_pattern=r"(?P<tag>[^:]+):") as st:
        key = "tenant7:orders"
        assert await atomic.multi(st, [("INCR", key)]) == [1]
        result = await atomic.watch(st, [key], lambda tx: [("INCR", key)])
        assert result.results == [2]
        shard = st.topology.shard_names.index(st.topology.shard_of(key.encode()))
        node = stampede_primaries.nodes[shard]
        markers = list(node.client().scan_iter(match="tenant7:orders:stampede:op:*"))
        assert len(markers) == 2
        assert all(0 < node.client().pttl(m) <= 600_000 for m in markers)


async def test_watch_refuses_a_command_whose_keys_it_cannot_check(st: Stampede) -> None:
    """A command keys_of does not know was sent unchecked: on independent primaries a
    GEOADD of another shard's key landed on the watched shard, out of reach of every
    routed read, and watch() reported success. It is refused before EXEC; nothing
    is written."""
    watched = PAIR[0]
    elsewhere = next(
        f"geo:{{{i}}}:b"
        for i in range(500)
        if st.topology.shard_of(f"geo:{{{i}}}:b".encode()) != st.topology.shard_of(watched.encode())
    )
    with pytest.raises(InvalidKeyError, match="cannot tell which keys GEOADD touches"):
        await atomic.watch(st, [watched], lambda tx: [("GEOADD", elsewhere, 0, 0, "m")])
    assert await st.topology.execute(elsewhere.encode(), "EXISTS", elsewhere) == 0
    if not st.topology.slot_bound:  # where it landed: the watched primary
        owner = st.topology.shard_of(watched.encode())
        assert await st.topology.execute_on(owner, "EXISTS", elsewhere) == 0


async def _markers(st: Stampede, near: str) -> list[bytes]:
    """Every operation marker on the shard of `near`."""
    found: list[bytes] = []
    cursor: Any = b"0"
    while True:
        cursor, keys = await st.topology.execute_on(
            st.topology.shard_of(near.encode()),
            "SCAN",
            cursor,
            "MATCH",
            b"stampede:op:*",
            "COUNT",
            1000,
        )
        found.extend(keys)
        if cursor in (b"0", 0, "0"):
            return found


async def test_a_writing_transaction_leaves_one_marker_for_ten_minutes(st: Stampede) -> None:
    """retries.md, the operation marker: an update() leaves `stampede:op:{<tag>}:<id>`
    (its first key's tag) holding "applied", expiring after 10 minutes; a MULTI/EXEC of
    read-only commands has no marker."""
    key = "mk:{42}:balance"
    await st.update("mk:{42}", [key], lambda cur: {key: b"1"})
    (marker,) = await _markers(st, key)
    assert marker.startswith(b"stampede:op:{42}:")
    assert await st.topology.execute(marker, "GET", marker) == b"applied"
    assert 590_000 < await st.topology.execute(marker, "PTTL", marker) <= 600_000
    assert await atomic.multi(st, [("GET", key), ("EXISTS", key)]) != []
    assert await _markers(st, key) == [marker]
