"""The guard script itself, called directly on real servers: what one call does with
keys that are missing, of another type, newer, repeated or expiring, what it keeps
for readers, and the version-hash floor it raises. Both topologies (one slot per
call on the cluster: the keys share a hash tag)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from stampede import Envelope, Stampede
from stampede.testing.memory import guard
from stampede.topology._guard import (
    GUARD,
    KEPT_DEPTH,
    KEPT_MAX,
    WriteRequest,
    joined,
    requests_for,
)
from stampede.typing import GuardStamp
from stampede.wire import new_token

YEAR_MS = 365 * 24 * 3600 * 1000


def _argv(
    writes: Sequence[tuple[int, str, bytes]], *, at: int = 0, keep: int = 5000
) -> list[object]:
    """The guard's ARGV for one write per key (each key its own stamp, in order): a
    lone key's stamp (version, token, expire-at, limit, keep) then its value; for
    several, per key: 1 (its key count), its stamp, its value."""
    out: list[object] = []
    for version, token, payload in writes:
        stamp = [version, token, at, 0, keep, Envelope(version, token, payload).encode()]
        out += stamp if len(writes) == 1 else [1, *stamp]
    return out


async def _guard(st: Stampede, keys: Sequence[bytes], argv: Sequence[object]) -> list[int]:
    return list(await st.topology.script(GUARD, list(keys), list(argv)))


async def _get(st: Stampede, key: bytes) -> bytes | None:
    value = await st.topology.execute(key, "GET", key)
    return value if value is None else bytes(value)


async def test_one_call_sorts_missing_wrongtype_newer_and_repeated_keys(st: Stampede) -> None:
    """Each key gets its own code from one call; a write refused by one of its keys
    writes none; a key twice in the call ends with the newer of its two writes."""
    fresh, listed, newer, twice = (b"{gs1}:fresh", b"{gs1}:list", b"{gs1}:newer", b"{gs1}:twice")
    await st.topology.execute(listed, "RPUSH", listed, b"x")
    high = (90, new_token(), b"high")
    assert await _guard(st, [newer], _argv([high])) == [1]
    a, b, c = (10, new_token(), b"a"), (20, new_token(), b"b"), (15, new_token(), b"c")
    codes = await _guard(
        st,
        [fresh, newer, twice, twice, twice],
        _argv([a, a, b, c, (20, b[1], b"b")]),
    )
    # `a` is older than `newer`'s stored write: kept out there, written where new.
    # `twice`: b written, then c (older than b, newer than nothing) kept out, then b again
    assert codes == [1, 0, 1, 0, 2]
    assert await _get(st, fresh) == Envelope(*a).encode()
    assert await _get(st, newer) == Envelope(*high).encode()
    assert await _get(st, twice) == Envelope(*b).encode()
    # a write one of whose keys holds another type writes none of its keys (-6)
    d = (30, new_token(), b"d")
    assert await _guard(st, [fresh, listed], _argv([d, d])) == [-6, -1]
    assert await _get(st, fresh) == Envelope(*a).encode()
    assert await st.topology.execute(listed, "TYPE", listed) in (b"list", "list")


async def test_a_missing_key_beside_a_key_of_another_type(st: Stampede) -> None:
    """The one EXISTS the guard asks for its missing keys finds the key of another
    type among them (MGET answers nil for both): that write is refused, and a
    separate write in the same call to a missing key goes ahead."""
    hashed, gone, other = b"{gs2}:hash", b"{gs2}:gone", b"{gs2}:other"
    await st.topology.execute(hashed, "HSET", hashed, b"f", b"v")
    w, x = (5, new_token(), b"w"), (6, new_token(), b"x")
    assert await _guard(st, [gone, hashed, other], _argv([w, w, x])) == [-6, -1, 1]
    assert await _get(st, gone) is None
    assert await _get(st, other) == Envelope(*x).encode()


async def test_kept_list_stays_between_four_and_eight_newest_first(st: Stampede) -> None:
    """Every replaced envelope is pushed, newest first; past eight the list is cut
    back to four; it expires within the keep window."""
    key, kept = b"{gs3}:k", b"{gs3}:k:stampede:p"
    stamps = [(v, new_token(), b"%d" % v) for v in range(1, 14)]
    lengths = []
    for stamp in stamps:
        assert await _guard(st, [key], _argv([stamp], keep=60_000)) == [1]
        lengths.append(await st.topology.execute(kept, "LLEN", kept))
    # the first write replaced nothing; then one more each push, cut back past 8
    assert lengths == [0, 1, 2, 3, 4, 5, 6, 7, 8, KEPT_DEPTH, 5, 6, 7]
    assert max(lengths) == KEPT_MAX
    listed = await st.topology.execute(kept, "LRANGE", kept, 0, -1)
    assert [bytes(v) for v in listed] == [Envelope(*s).encode() for s in stamps[-2:-9:-1]]
    assert 0 < await st.topology.execute(kept, "PTTL", kept) <= 60_000


async def test_what_an_expiring_write_replaces_expires_with_it(st: Stampede) -> None:
    """A write with an expiry keeps what it replaced no longer than itself lives."""
    key, kept = b"{gs4}:k", b"{gs4}:k:stampede:p"
    assert await _guard(st, [key], _argv([(1, new_token(), b"old")])) == [1]
    at = int(time.time() * 1000) + 60_000  # far enough that a stalled machine still sees it
    assert await _guard(st, [key], _argv([(2, new_token(), b"new")], at=at, keep=YEAR_MS)) == [1]
    assert 0 < await st.topology.execute(key, "PTTL", key) <= 60_000
    assert 0 < await st.topology.execute(kept, "PTTL", kept) <= 60_000
    # keep 0: nothing kept
    other, other_kept = b"{gs4}:o", b"{gs4}:o:stampede:p"
    for v in (1, 2):
        assert await _guard(st, [other], _argv([(v, new_token(), b"v")], keep=0)) == [1]
    assert await st.topology.execute(other_kept, "EXISTS", other_kept) == 0


async def test_floor_rises_only_where_a_version_hash_exists(st: Stampede) -> None:
    """A guarded write raises the floor `g` of a key's version hash when the key has
    one (a transaction touched it) and creates no hash where there is none."""
    with_hash, plain = b"{gs5}:t", b"{gs5}:p"
    vh, plain_vh = b"{gs5}:t:stampede:v", b"{gs5}:p:stampede:v"
    await st.topology.execute(vh, "HSET", vh, b"k", with_hash)
    await st.topology.execute(vh, "PEXPIRE", vh, 60_000)
    stamp = (77, new_token(), b"v")
    assert await _guard(st, [with_hash, plain], _argv([stamp, stamp])) == [1, 1]
    floor = await st.topology.execute(vh, "HGET", vh, b"g")
    assert bytes(floor) == b"77:" + stamp[1].encode()
    assert await st.topology.execute(plain_vh, "EXISTS", plain_vh) == 0
    older = (70, new_token(), b"o")
    assert await _guard(st, [with_hash], _argv([older])) == [0]
    assert bytes(await st.topology.execute(vh, "HGET", vh, b"g")) == floor


async def test_a_key_twice_among_more_than_eight(st: Stampede) -> None:
    """Past eight keys the guard finds a repeated key with a table, not by pairs:
    the same outcome as a short call (the newer write lands, the older is kept out,
    and what the first write replaced is kept)."""
    keys = [b"{gs6}:k%d" % i for i in range(9)]
    twice = keys[4]
    old = (1, new_token(), b"old")
    assert await _guard(st, [twice], _argv([old])) == [1]
    new, older = (9, new_token(), b"new"), (5, new_token(), b"older")
    writes = [new] * 9 + [older, new]
    codes = await _guard(st, [*keys, twice, twice], _argv(writes))
    assert codes == [1] * 9 + [0, 2]
    assert await _get(st, twice) == Envelope(*new).encode()
    kept = b"{gs6}:k4:stampede:p"
    assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [Envelope(*old).encode()]


async def test_a_key_written_twice_in_one_call_keeps_all_it_replaced(st: Stampede) -> None:
    """Two writes of one key merged into one call (two writers' batches), both newer
    than the stored value: the key ends with the newer, and its kept list holds both
    values they replaced, newest first. A reader whose other keys still hold the
    stored write needs that one (it used to keep only the first write's value, which
    no reader of the key had seen)."""
    key, kept = b"{gs10}:k", b"{gs10}:k:stampede:p"
    stored, first, second = (1, new_token(), b"s"), (2, new_token(), b"a"), (3, new_token(), b"b")
    assert await _guard(st, [key], _argv([stored])) == [1]
    assert await _guard(st, [key, key], _argv([first, second])) == [1, 1]
    assert await _get(st, key) == Envelope(*second).encode()
    assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [
        Envelope(*first).encode(),
        Envelope(*stored).encode(),
    ]


async def test_a_key_without_braces_keeps_and_raises_its_floor(st: Stampede) -> None:
    """A key with no braces: what it replaces goes to `{key}:stampede:p:u` and its
    floor rises in `{key}:stampede:v:u`, alone in a call or twice in one."""
    key = b"gs7-plain"
    kept, vh = b"{gs7-plain}:stampede:p:u", b"{gs7-plain}:stampede:v:u"
    await st.topology.execute(vh, "HSET", vh, b"k", key)
    await st.topology.execute(vh, "PEXPIRE", vh, 60_000)
    first, second = (3, new_token(), b"a"), (4, new_token(), b"b")
    assert await _guard(st, [key], _argv([first])) == [1]
    assert await _guard(st, [key], _argv([second])) == [1]
    assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [Envelope(*first).encode()]
    assert bytes(await st.topology.execute(vh, "HGET", vh, b"g")) == b"4:" + second[1].encode()
    third, fourth = (6, new_token(), b"c"), (5, new_token(), b"d")
    assert await _guard(st, [key, key], _argv([third, fourth])) == [1, 0]
    assert await _get(st, key) == Envelope(*third).encode()
    assert bytes(await st.topology.execute(vh, "HGET", vh, b"g")) == b"6:" + third[1].encode()
    assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [
        Envelope(*second).encode(),
        Envelope(*first).encode(),
    ]


def _call(
    writes: Sequence[tuple[Sequence[bytes], tuple[int, str, bytes]]],
) -> tuple[list[bytes], list[object]]:
    """The keys and ARGV the client sends for `writes` in one call (each: its keys and
    its stamp, every key written with that stamp's envelope), through the client's own
    `requests_for` and `joined`."""
    requests: list[WriteRequest] = []
    for keys, (version, token, payload) in writes:
        value = Envelope(version, token, payload).encode()
        stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": 5000}
        requests += requests_for(keys, [value] * len(keys), [range(len(keys))], (), stamp)
    keys, argv, _ = joined(requests)
    return keys, argv


async def test_each_writes_stamp_once_for_its_keys(st: Stampede) -> None:
    """The layout the client sends: a lone write's stamp once before its values; in a
    batch, each write's key count, stamp and values. Each key is judged and written
    with its own write's stamp: a write one of whose keys refuses writes none, a key
    in two writes of the call ends with the newer, a floor rises to the stamp of the
    write that landed, and what a key replaced is kept."""
    a, b, c, listed = b"{gs9}:a", b"{gs9}:b", b"{gs9}:c", b"{gs9}:list"
    vh, kept = b"{gs9}:c:stampede:v", b"{gs9}:a:stampede:p"
    await st.topology.execute(listed, "RPUSH", listed, b"x")
    await st.topology.execute(vh, "HSET", vh, b"k", c)
    await st.topology.execute(vh, "PEXPIRE", vh, 60_000)
    first = (10, new_token(), b"first")
    keys, argv = _call([([a, b, c], first)])
    assert len(argv) == 5 + 3  # the stamp once, then the three values
    assert await _guard(st, keys, argv) == [1, 1, 1]
    newer, refused, older = (
        (20, new_token(), b"n"),
        (21, new_token(), b"r"),
        (15, new_token(), b"o"),
    )
    keys, argv = _call([([a, c], newer), ([b, listed], refused), ([c], older)])
    assert len(argv) == 6 * 3 + 5
    assert await _guard(st, keys, argv) == [1, 1, -6, -1, 0]
    assert await _get(st, a) == Envelope(*newer).encode()
    assert await _get(st, b) == Envelope(*first).encode()
    assert await _get(st, c) == Envelope(*newer).encode()
    assert bytes(await st.topology.execute(vh, "HGET", vh, b"g")) == b"20:" + newer[1].encode()
    assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [Envelope(*first).encode()]


async def test_the_script_decides_as_the_memory_topology_does(st: Stampede) -> None:
    """Stored values at the edges of the envelope form (version 0, leading zeros, the
    largest version and one past it, clock against sequence, a limit, no envelope):
    the script's code for each is the one `testing.memory.guard` gives."""
    token = "01JD0000000000000000000000"
    stored = [
        b"0:" + token.encode() + b":x",
        b"007:" + token.encode() + b":x",
        b"00:" + token.encode(),
        b"9223372036854775807:" + token.encode() + b":x",
        b"9223372036854775808:" + token.encode() + b":x",
        b"1795653195438533993:" + token.encode() + b":x",
        b"5:" + token.encode() + b":x",
        b"5:" + token.encode(),
        b"12:notatoken:x",
        b"plain value",
        b":" + token.encode(),
    ]
    writes = [(b"6", b"0"), (b"1795653195438533994", b"1795653195438533995")]
    writes.append((b"1795653195438533994", b"1795653195438533000"))
    for n, (version, limit) in enumerate(writes):
        keys = [b"{gs10}:%d:%d" % (n, i) for i in range(len(stored))]
        for key, value in zip(keys, stored, strict=True):
            await st.topology.execute(key, "SET", key, value)
        codes = []
        for key in keys:  # one write per key: a refusal leaves the others alone
            argv = [int(version), "T" * 26, 0, int(limit), 0, b"%s:%s" % (version, b"T" * 26)]
            codes += await _guard(st, [key], argv)
        expected = [guard(v, version, b"T" * 26, limit) for v in stored]
        assert codes == [int(c) for c in expected], (version, codes)


async def test_a_batch_of_writes_of_one_two_and_three_keys(st: Stampede) -> None:
    """Key counts of every size in one batch, no key twice: each key lands with its
    own write's stamp and value, and each write's keys keep what they replaced."""
    keys = [b"{gs11}:%d" % i for i in range(6)]
    old = (1, new_token(), b"old")
    call_keys, argv = _call([(keys, old)])
    assert await _guard(st, call_keys, argv) == [1] * 6
    one, two, three = (2, new_token(), b"1"), (3, new_token(), b"2"), (4, new_token(), b"3")
    call_keys, argv = _call([(keys[:1], one), (keys[1:3], two), (keys[3:], three)])
    assert argv[0] == 1 and argv[7] == 2 and argv[15] == 3  # each write's key count
    assert await _guard(st, call_keys, argv) == [1] * 6
    for key, stamp in zip(keys, [one, two, two, three, three, three], strict=True):
        assert await _get(st, key) == Envelope(*stamp).encode()
        kept = key + b":stampede:p"
        assert await st.topology.execute(kept, "LRANGE", kept, 0, -1) == [Envelope(*old).encode()]


async def test_a_write_of_no_keys_in_a_batch_is_passed_over(st: Stampede) -> None:
    """A request with no keys in a batch (its count 0, its stamp, no values) takes
    nothing from the keys after it, wherever it stands."""
    keys = [b"{gs12}:a", b"{gs12}:b"]
    a, b, none = (2, new_token(), b"a"), (3, new_token(), b"b"), (9, new_token(), b"-")
    call_keys, argv = _call([([], none), (keys[:1], a), ([], none), ([], none), (keys[1:], b)])
    assert await _guard(st, call_keys, argv) == [1, 1]
    assert await _get(st, keys[0]) == Envelope(*a).encode()
    assert await _get(st, keys[1]) == Envelope(*b).encode()
