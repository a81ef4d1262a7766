"""Hash slots: `keyslot` against a real cluster-enabled redis-server, tags, policies, slot maps."""

from __future__ import annotations

import ast
import doctest
import importlib
import itertools
import random
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot as redis_py_key_slot

import stampede.keys
from stampede.errors import ConfigurationError, InvalidKeyError
from stampede.keys import (
    SLOTS,
    HashPolicy,
    SlotMap,
    hash_tag,
    hashed_part,
    keyslot,
    keyslots,
    to_bytes,
)
from stampede.testing import RedisNode

# -- a real server to compare with ------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[redis.Redis]:
    """One cluster-enabled redis-server: it answers CLUSTER KEYSLOT without any slots."""
    with RedisNode(cluster_enabled=True) as node:
        client = node.client()
        try:
            yield client
        finally:
            client.close()


def server_slots(client: redis.Redis, keys: Sequence[bytes]) -> list[int]:
    """CLUSTER KEYSLOT for every key, in one pipeline."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        # redis-py leaves execute_command unannotated.
        pipe.execute_command("CLUSTER", "KEYSLOT", key)  # type: ignore[no-untyped-call]
    return [int(slot) for slot in pipe.execute()]


# Keys built from pieces that matter to the tag rule, plus arbitrary bytes.
_PIECES = st.one_of(
    st.sampled_from([b"{", b"}", b"{}", b"}{", b":", b"\xff", b"\x00", b"\xc3\xa9", b" ", b"\n"]),
    st.binary(min_size=1, max_size=4),
)
KEYS = st.one_of(st.lists(_PIECES, max_size=12).map(b"".join), st.binary(max_size=48))


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(KEYS, min_size=1, max_size=40))
def test_keyslot_matches_cluster_keyslot(server: redis.Redis, keys: list[bytes]) -> None:
    """keyslot agrees with CLUSTER KEYSLOT on generated keys: braces, NUL, non-UTF-8 bytes."""
    assert [keyslot(key) for key in keys] == server_slots(server, keys)


@settings(max_examples=50, deadline=None)
@given(keys=st.lists(st.text(st.characters(exclude_categories=["Cs"])), min_size=1))
def test_str_keys_hash_as_their_utf8(server: redis.Redis, keys: list[str]) -> None:
    """A str key lands where Redis puts its UTF-8 encoding."""
    assert [keyslot(key) for key in keys] == server_slots(server, [k.encode() for k in keys])


def _seeded_keys(count: int, seed: int = 20240611) -> list[bytes]:
    rnd = random.Random(seed)
    alphabet = [b"{", b"}", b":", b"a", b"b", b"7", b"\xff", b"\x00", b"user", b"{42}"]
    keys = []
    for _ in range(count):
        if rnd.random() < 0.3:
            keys.append(rnd.randbytes(rnd.randrange(0, 24)))
        else:
            keys.append(b"".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 10))))
    return keys


def test_five_thousand_seeded_keys_match_the_server(server: redis.Redis) -> None:
    """keyslot, keyslots, hashed_part and redis-py all agree with the server on 5000 keys."""
    keys = _seeded_keys(5000)
    expected = server_slots(server, keys)
    assert [keyslot(key) for key in keys] == expected
    assert keyslots(keys) == expected
    assert [redis_py_key_slot(hashed_part(key)) for key in keys] == expected
    assert [redis_py_key_slot(key) for key in keys] == expected


def test_policy_without_a_match_hashes_like_the_server(server: redis.Redis) -> None:
    """Keys no policy rule matches fall back to exactly the standard rule."""
    policy = HashPolicy(rb"never-matches:(?P<tag>.*)")
    keys = _seeded_keys(500, seed=7)
    assert [policy.keyslot(key) for key in keys] == server_slots(server, keys)


# -- the cluster specification's examples and known values ------------------------------


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        (b"{user1000}.following", b"user1000"),
        (b"{user1000}.followers", b"user1000"),
        (b"foo{}{bar}", None),
        (b"foo{{bar}}zap", b"{bar"),
        (b"foo{bar}{zap}", b"bar"),
        (b"{a}:{b}", b"a"),
        (b"no-braces", None),
        (b"open{only", None),
        (b"close}only", None),
        (b"}{x}", b"x"),
        (b"", None),
        ("caf\u00e9:{\u00e9}", "\u00e9".encode()),
    ],
)
def test_hash_tag_follows_the_spec(key: bytes | str, tag: bytes | None) -> None:
    """The tag is the bytes between the first '{' and the next '}', only when non-empty."""
    assert hash_tag(key) == tag
    assert hashed_part(key) == (to_bytes(key) if tag is None else tag)


def test_spec_examples_colocate() -> None:
    """The spec's following/followers keys share a slot; empty-tag keys hash the whole key."""
    assert keyslot("{user1000}.following") == keyslot("{user1000}.followers")
    assert keyslot("foo{}{bar}") == redis_py_key_slot(b"foo{}{bar}")
    assert keyslot("foo{{bar}}zap") == keyslot("{bar")
    assert keyslot("foo{bar}{zap}") == keyslot("bar")


def test_known_crc16_values() -> None:
    """'123456789' is CRC16-XMODEM's check input (0x31C3), so its slot is 0x31C3 % 16384."""
    assert keyslot("123456789") == 0x31C3 % SLOTS == 12739
    assert keyslot(b"") == 0
    assert keyslot("{}") == keyslot(b"{}")


def test_to_bytes_and_bad_key_types() -> None:
    """str is UTF-8 encoded, bytes kept; other types and lone surrogates are InvalidKeyError."""
    assert to_bytes("caf\u00e9") == b"caf\xc3\xa9"
    raw = b"\xff{x}"
    assert to_bytes(raw) is raw
    for bad in (42, 4.2, None, ["k"], memoryview(b"k")):
        with pytest.raises(InvalidKeyError, match="must be bytes or str"):
            keyslot(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError, match="must be bytes or str"):
            keyslots([b"ok", bad])  # type: ignore[list-item]
    with pytest.raises(InvalidKeyError, match="must be bytes or str"):
        to_bytes(bytearray(b"k"))  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="UTF-8") as info:
        to_bytes("\ud800")
    assert info.value.key == "\ud800"


def test_keyslot_refuses_a_bytearray_as_every_key_function_does() -> None:
    """keyslot(bytearray(...)) answered a slot (its fast path calls the key's own
    `find`, which a bytearray has), where the docs take bytes and str only and
    `to_bytes`, `keyslots`, `hash_tag` and `HashPolicy.keyslot` refuse it: one
    function disagreed with the others. It is an InvalidKeyError now; a bytes
    subclass is still bytes."""

    class Key(bytes):
        pass

    policy = HashPolicy(r"(?P<tag>\w+):")
    for bad in (bytearray(b"user:{42}:a"), bytearray(b"plain")):
        for function in (keyslot, hash_tag, hashed_part, policy.keyslot):
            with pytest.raises(InvalidKeyError, match="must be bytes or str, not bytearray"):
                function(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError, match="must be bytes or str, not bytearray"):
            keyslots([bad])  # type: ignore[list-item]
    assert keyslot(Key(b"user:{42}:a")) == keyslot(b"user:{42}:a") == keyslot("42")


def test_keyslots_matches_keyslot_and_takes_str() -> None:
    """keyslots is keyslot over a sequence, str keys included."""
    keys: list[bytes | str] = ["a", b"b{c}", "user:{42}:x", b""]
    assert keyslots(keys) == [keyslot(k) for k in keys]
    assert keyslots([]) == []


@pytest.mark.parametrize("module", ["slots", "slotmap", "naming", "rules", "analysis"])
def test_docstring_examples_run(module: str) -> None:
    """The examples in the keys modules' docstrings are true."""
    found = doctest.testmod(importlib.import_module(f"stampede.keys._{module}"))
    assert found.failed == 0


def test_keys_package_is_pure() -> None:
    """stampede.keys imports only the standard library and stampede.errors: no client, no I/O.

    The one exception is the live analysis (`_live`, `_live_scan`): it talks to a `Topology` it is
    handed, so it may use asyncio, and names the Topology type for the type checker
    only; it still imports no client.
    """
    package = Path(stampede.keys.__file__).parent
    allowed = {"__future__", "array", "binascii", "collections", "dataclasses", "heapq", "math"}
    allowed |= {"re", "struct", "types", "typing"}
    for source in sorted(package.glob("*.py")):
        tree = ast.parse(source.read_text())
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        extra = {"asyncio"} if source.name in ("_live.py", "_live_scan.py") else set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {"<relative>"} if node.level else {(node.module or "").split(".")[0]}
                if node.level == 2 and id(node) not in type_only:
                    assert node.module == "errors", f"{source.name} imports ..{node.module}"
            else:
                continue
            assert names <= allowed | extra | {"<relative>"}, f"{source.name} imports {names}"


# -- HashPolicy --------------------------------------------------------------------------


def test_policy_hashes_the_tag_group() -> None:
    """A matching rule hashes its 'tag' group; a key it does not match uses the standard rule."""
    policy = HashPolicy(r"order:(?P<tag>\d+):")
    assert policy.hashed_part("order:42:lines") == b"42"
    assert policy.keyslot("order:42:lines") == keyslot("42") == policy.keyslot(b"order:42:total")
    assert policy.tag("user:{7}:cart") is None
    assert policy.hashed_part("user:{7}:cart") == b"7"
    assert policy.hashed_part("plain") == b"plain"
    assert policy.keyslot("user:{7}:cart") == keyslot("user:{7}:cart")


def test_policy_is_anchored_at_the_start() -> None:
    """Rules match at the start of the key (PCRE_ANCHORED), not anywhere in it."""
    policy = HashPolicy(r"order:(?P<tag>\d+)")
    assert policy.tag("x:order:42") is None
    assert policy.tag("order:42:x") == b"42"


def test_policy_rules_are_tried_in_order() -> None:
    """The first rule that matches and sets 'tag' decides; one leaving it unset is skipped."""
    policy = HashPolicy(r"(?:a:(?P<tag>\w+)|b:.*)", r"b:(?P<tag>\w)", r"(?P<tag>.*)")
    assert policy.tag("a:xyz") == b"xyz"
    assert policy.tag("b:xyz") == b"x"
    assert policy.tag("c:xyz") == b"c:xyz"
    assert policy.patterns[1] == r"b:(?P<tag>\w)"


def test_policy_accepts_pcre_named_groups() -> None:
    """Redis Enterprise's `(?<tag>...)` is accepted; lookbehinds and escapes are left alone."""
    policy = HashPolicy(r".*\{(?<tag>.*)\}.*")
    assert policy.tag("x{abc}y") == b"abc"
    behind = HashPolicy(r"(?<=^)k:(?<tag>\d+)")
    assert behind.tag("k:12") == b"12"
    assert HashPolicy(r"\\(?<tag>x)").tag(b"\\x") == b"x"
    with pytest.raises(ConfigurationError, match="no group named 'tag'"):
        HashPolicy(r"\(?<tag>x\)")


def test_policy_empty_tag_hashes_empty() -> None:
    """A rule whose tag matches empty hashes b'' (slot 0), as Redis Enterprise does."""
    policy = HashPolicy(r"catchall:(?P<tag>)")
    assert policy.hashed_part("catchall:anything") == b""
    assert policy.keyslot("catchall:anything") == 0


def test_policy_str_rules_see_characters_and_bytes_rules_see_bytes() -> None:
    """A str rule matches decoded text (bad bytes escaped); the tag is the key's own bytes."""
    text_rule = HashPolicy(r"(?P<tag>\w)")
    assert text_rule.tag("\u00e9t\u00e9") == "\u00e9".encode()
    assert text_rule.tag(b"\xff\xfe") is None
    any_rule = HashPolicy(r"(?P<tag>..)")
    assert any_rule.tag(b"\xff\xfeX") == b"\xff\xfe"
    byte_rule = HashPolicy(rb"(?P<tag>.)")
    assert byte_rule.tag("\u00e9") == b"\xc3"
    compiled = HashPolicy(re.compile(rb"k(?P<tag>\d)", re.IGNORECASE))
    assert compiled.tag(b"K5") == b"5"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(", "not a valid regular expression"),
        (b"[", "not a valid regular expression"),
        ("user:(\\d+)", "no group named 'tag'"),
        (re.compile("x"), "no group named 'tag'"),
        (42, "must be str, bytes or re.Pattern"),
    ],
)
def test_bad_policies_are_configuration_errors(pattern: object, message: str) -> None:
    """A bad regex, a missing 'tag' group or a non-pattern raises ConfigurationError."""
    with pytest.raises(ConfigurationError, match=message):
        HashPolicy(pattern)  # type: ignore[arg-type]


def test_policy_equality_and_repr() -> None:
    """Policies with the same rules are equal and hash alike; repr shows the rules."""
    assert HashPolicy("a(?P<tag>b)") == HashPolicy("a(?<tag>b)")
    assert hash(HashPolicy("a(?P<tag>b)")) == hash(HashPolicy("a(?<tag>b)"))
    assert HashPolicy("a(?P<tag>b)") != HashPolicy(b"a(?P<tag>b)")
    assert HashPolicy("a(?P<tag>b)") != "a(?P<tag>b)"
    assert repr(HashPolicy("a(?P<tag>b)")) == "HashPolicy('a(?P<tag>b)')"


# -- SlotMap -----------------------------------------------------------------------------


def test_even_split_like_redis_cli() -> None:
    """even(3) gives redis-cli's 0-5460, 5461-10922, 10923-16383."""
    slot_map = SlotMap.even(3)
    assert slot_map.shards == 3
    assert slot_map.ranges() == {0: [(0, 5460)], 1: [(5461, 10922)], 2: [(10923, 16383)]}
    assert slot_map.slot_counts() == (5461, 5462, 5461)
    assert [slot_map.shard_of(s) for s in (0, 5460, 5461, 10922, 10923, 16383)] == [
        0,
        0,
        1,
        1,
        2,
        2,
    ]
    assert SlotMap.even(1).ranges() == {0: [(0, 16383)]}
    assert SlotMap.even(2).ranges() == {0: [(0, 8191)], 1: [(8192, 16383)]}
    assert SlotMap.even(SLOTS).ranges()[SLOTS - 1] == [(SLOTS - 1, SLOTS - 1)]


@settings(max_examples=60, deadline=None)
@given(shards=st.integers(1, SLOTS))
def test_even_split_is_a_contiguous_partition(shards: int) -> None:
    """Any even split gives each shard one non-empty range, in order, covering every slot."""
    ranges = SlotMap.even(shards).ranges()
    assert list(ranges) == list(range(shards))
    spans = [spans[0] for spans in ranges.values()]
    assert all(len(r) == 1 for r in ranges.values())
    assert spans[0][0] == 0 and spans[-1][1] == SLOTS - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    if shards <= 64:
        sizes = [last - first + 1 for first, last in spans]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
def test_even_split_matches_redis_cli_cluster_create() -> None:
    """For 3 to 8 masters, even(n) is exactly the allocation `redis-cli --cluster create` plans."""
    nodes = [RedisNode(cluster_enabled=True) for _ in range(8)]
    try:
        for node in nodes:
            node.start()
        for masters in range(3, 9):
            planned = subprocess.run(
                ["redis-cli", "--cluster", "create", *(n.address for n in nodes[:masters])],
                input="no\n",
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout
            found = re.findall(r"Master\[(\d+)\] -> Slots (\d+) - (\d+)", planned)
            expected = {int(i): [(int(a), int(b))] for i, a, b in found}
            assert len(expected) == masters, planned
            assert SlotMap.even(masters).ranges() == expected
    finally:
        for node in nodes:
            node.stop()


@pytest.mark.parametrize("shards", [0, -1, SLOTS + 1, True, 2.0, "3"])
def test_even_rejects_bad_shard_counts(shards: object) -> None:
    """even() needs an int from 1 to 16384."""
    with pytest.raises(ConfigurationError, match="from 1 to 16384"):
        SlotMap.even(shards)  # type: ignore[arg-type]


def test_from_ranges_builds_the_map() -> None:
    """from_ranges takes several inclusive ranges per shard, in any order."""
    slot_map = SlotMap.from_ranges({0: [(0, 99), (200, 16383)], 1: [(100, 149)], 2: [(150, 199)]})
    assert slot_map.shards == 3
    assert slot_map.shard_of(99) == 0 and slot_map.shard_of(100) == 1
    assert slot_map.shard_of(199) == 2 and slot_map.shard_of(200) == 0
    assert slot_map.ranges() == {0: [(0, 99), (200, 16383)], 1: [(100, 149)], 2: [(150, 199)]}
    assert SlotMap.from_ranges(SlotMap.even(5).ranges()) == SlotMap.even(5)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({0: [(0, 100)], 1: [(200, 16383)]}, "slots 101-199 not assigned to any shard"),
        ({0: [(0, 16382)]}, "slot 16383 not assigned"),
        ({0: [(0, 100)], 1: [(50, 16383)]}, "slots 50-100 assigned twice: to shards 0 and 1"),
        ({0: [(0, 16383), (7, 7)]}, "slot 7 assigned twice: to shard 0"),
        ({0: [(0, 16383)], 2: [(1, 1)]}, r"numbered 0\.\.1"),
        ({0: [(0, 16383)], 1: []}, "shard 1 owns no slots"),
        ({0: [(5, 2)]}, "first <= last"),
        ({0: [(0, 16384)]}, "first <= last <= 16383"),
        ({0: [(-1, 16383)]}, "0 <= first"),
        ({0: [(0, "9")]}, "must be integers"),
        ({}, "at least one shard"),
        # one pair where a list of pairs belongs (a TypeError from unpacking an int)
        ({0: (0, 8191), 1: (8192, 16383)}, r"shard 0: its slot ranges must be a list of"),
        ({0: [(0, 8191)], 1: [range(8192, 16384)]}, r"pairs such as \[\(0, 8191\)\]"),
    ],
)
def test_from_ranges_names_gaps_and_overlaps(
    ranges: dict[int, list[tuple[int, int]]], message: str
) -> None:
    """Each slot exactly once, shards 0..n-1 each owning some; else an error saying where."""
    with pytest.raises(ConfigurationError, match=message):
        SlotMap.from_ranges(ranges)


def test_gap_messages_are_bounded() -> None:
    """Many gaps are summarised, not listed one by one."""
    ranges = {0: [(s, s) for s in range(0, SLOTS, 2)]}
    with pytest.raises(ConfigurationError, match="and 8187 more gaps"):
        SlotMap.from_ranges(ranges)


def test_slot_map_from_owner_table() -> None:
    """The constructor takes one owner per slot and checks numbering and length."""
    owners = [slot % 4 for slot in range(SLOTS)]
    slot_map = SlotMap(owners)
    assert slot_map.shards == 4
    assert slot_map.shard_of(5) == 1
    assert len(slot_map.ranges()[0]) == SLOTS // 4
    assert "..." in repr(slot_map)
    with pytest.raises(ConfigurationError, match="each of the 16384 slots"):
        SlotMap([0] * 10)
    with pytest.raises(ConfigurationError, match=r"shard\(s\) 1 own none"):
        SlotMap([0] * (SLOTS - 1) + [2])
    with pytest.raises(ConfigurationError, match="shard numbers"):
        SlotMap([-1] * SLOTS)
    with pytest.raises(ConfigurationError, match="16384 slots, got a value of type NoneType"):
        SlotMap(None)  # type: ignore[arg-type]


def test_shard_of_checks_the_slot_and_keys_route() -> None:
    """shard_of rejects slots outside 0..16383; shard_of_key routes a key (with a policy too)."""
    slot_map = SlotMap.even(3)
    for bad in (-1, SLOTS):
        with pytest.raises(ValueError, match=r"0\.\.16383"):
            slot_map.shard_of(bad)
    assert slot_map.shard_of_key("123456789") == 2
    assert slot_map.shard_of_key("user:{123456789}:x") == 2
    policy = HashPolicy(r"u:(?P<tag>\d+)")
    assert slot_map.shard_of_key("u:123456789:x", policy=policy) == 2


def test_slot_map_equality_and_repr() -> None:
    """Maps with the same owners are equal and hash alike; repr lists ranges."""
    assert SlotMap.even(3) == SlotMap.from_ranges(
        {0: [(0, 5460)], 1: [(5461, 10922)], 2: [(10923, 16383)]}
    )
    assert hash(SlotMap.even(3)) == hash(SlotMap.even(3))
    assert SlotMap.even(3) != SlotMap.even(4)
    assert SlotMap.even(3) != 3
    assert repr(SlotMap.even(2)) == "<SlotMap shards=2 {0: [0-8191], 1: [8192-16383]}>"


@pytest.mark.timeout(180)
def test_slots_takes_sentinels_and_services() -> None:
    """`stampede slots --sentinel URL --service NAME` (repeatable), as scan, worker and
    queue take them: every primary Sentinel names is walked, shards named after the
    services; --sentinel with --url, or without --service, is a usage error."""
    import json
    import os
    import sys

    from stampede.testing import LocalSentinels

    with LocalSentinels(2, replicas=1, sentinels=1) as watched:
        for name in watched.names:
            primary = watched.node_at(watched.primary_of(name))
            primary.client().mset({f"{name}:{i}": b"x" for i in range(5)})
        where = [f"--sentinel={u}" for u in watched.sentinel_urls]
        where += [f"--service={n}" for n in watched.names]

        def slots(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "stampede", "slots", *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, "COLUMNS": "160"},
            )

        done = slots(*where, "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["total"] == 10, report
        assert [entry["name"] for entry in report["shards"]] == watched.names, report
        mixed = slots(*where, "--url", "redis://127.0.0.1:1")
        assert mixed.returncode == 2 and "not both" in mixed.stderr
        half = slots(where[0])
        assert half.returncode == 2 and "--service" in half.stderr
