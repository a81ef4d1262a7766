"""The one retry policy: which commands may be resent, and operation-marker keys."""

from __future__ import annotations

import random

import pytest

from stampede.keys import HashPolicy, keyslot
from stampede.testing.proxy import _reply_end
from stampede.topology._guard import CROSS_SLOT_GUARD_SHA, GUARD_SCRIPT, GUARD_SHA
from stampede.topology._resp import blocking
from stampede.topology._retries import Markers, all_idempotent, describe, is_idempotent


@pytest.mark.parametrize(
    "command",
    [
        ("GET", "k"),
        (b"mget", b"a", b"b"),
        ("XRANGE", "s", "-", "+"),
        ("CLUSTER", "SLOTS"),
        ("CONFIG GET", "maxmemory"),
        ("EVALSHA", GUARD_SHA, 1, "k"),
        ("EVALSHA", CROSS_SLOT_GUARD_SHA.upper(), 0),
        ("EVAL", GUARD_SCRIPT, 1, "k"),
    ],
)
def test_reads_and_guarded_scripts_are_idempotent(command: tuple[object, ...]) -> None:
    assert is_idempotent(command)


@pytest.mark.parametrize(
    "command",
    [
        ("INCR", "k"),
        ("XADD", "s", "*", "f", "v"),
        ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
        ("XCLAIM", "s", "g", "c", 0, "1-0"),
        ("DEL", "k"),
        ("SET", "k", "v"),
        ("EVALSHA", "0" * 40, 0),
        ("EVAL", "return 1", 0),
        ("CLUSTER", "RESET"),
        ("CONFIG", "SET", "x", "y"),
        (),
    ],
)
def test_everything_else_is_not(command: tuple[object, ...]) -> None:
    assert not is_idempotent(command)
    assert not all_idempotent([("GET", "k"), command])


def test_describe_names_commands_never_their_arguments() -> None:
    text = describe([("MULTI",), ("SET", "secret-key", "secret-value"), ("EXEC",)])
    assert text == "MULTI/EXEC (SET)"
    assert "secret" not in describe([("HSET", "secret", "f", "secret")])
    assert describe([("EVALSHA", GUARD_SHA, 0)]) == f"EVALSHA {GUARD_SHA[:12]}"


def test_markers_share_the_slot_of_the_keys() -> None:
    """Tagged keys lend their tag; others get a searched `{n}` tag, for any hashing rule."""
    markers = Markers(keyslot)
    assert markers.key(b"user:{42}:balance", "T") == b"stampede:op:{42}:T"
    rng = random.Random(5)
    for _ in range(20):
        key = b"plain:%d" % rng.randrange(10**9)
        marker = markers.key(key, "T")
        assert marker.startswith(b"stampede:op:{") and keyslot(marker) == keyslot(key)
    policy = HashPolicy(r"^stampede:op:(?P<tag>\{\d+\})")
    custom = Markers(policy.keyslot)
    assert policy.keyslot(custom.key(b"user:{42}:x", "T")) == policy.keyslot(b"user:{42}:x")


@pytest.mark.parametrize(
    "reply",
    [
        b"+OK\r\n",
        b"-ERR x\r\n",
        b":1\r\n",
        b"$-1\r\n",
        b"$3\r\nabc\r\n",
        b"*-1\r\n",
        b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
        b"%1\r\n+a\r\n:1\r\n",
        b"_\r\n",
    ],
)
def test_the_proxy_finds_where_each_reply_ends(reply: bytes) -> None:
    assert _reply_end(reply + b"+NEXT\r\n", 0) == len(reply)
    assert _reply_end(reply[:-1], 0) is None


def test_blocking_counts_the_waits_a_pipeline_asks_for() -> None:
    """The socket timeout of a pipeline grows by what its WAIT / WAITAOF may block (in
    order: the server runs them one after the other); a malformed one adds nothing
    (the server refuses it) and nothing raises before the pipeline is sent."""
    assert blocking([("EVALSHA", "sha", 0), ("WAIT", 1, 1500)]) == 1.5
    assert blocking([("WAIT", 1, 1000), (b"WAITAOF", 1, 1, 500)]) == 1.5
    assert blocking([("GET", "k"), ("MGET", "a", "b")]) == 0
    assert blocking([("WAIT", "one", "soon"), ("WAIT", 1), ()]) == 0
