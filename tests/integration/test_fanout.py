"""Scatter-gather reads: one round trip per shard, results in the caller's order."""

from __future__ import annotations

import pytest

import stampede
from stampede import (
    InvalidKeyError,
    InvalidValueError,
    MalformedEnvelope,
    ShardUnavailable,
    Stampede,
    fanout,
)

from ..support import spread_keys


async def test_mget_keeps_the_callers_order(st: Stampede) -> None:
    """Keys over several shards come back in the order asked, with None for missing ones."""
    keys = spread_keys(st, "fan", 6)
    for key in keys[:5]:
        await st.topology.execute(key.encode(), "SET", key, f"value of {key}")
    asked = [keys[5], *reversed(keys[:5]), keys[0]]  # a missing key, reversed order, a repeat
    expected = [None, *[f"value of {k}".encode() for k in asked[1:]]]
    assert await fanout.mget(st, asked) == expected
    assert len(fanout.shards_for(st, keys)) >= 2


async def test_tagged_keys_are_one_request(st: Stampede) -> None:
    """Keys under one hash tag live on one shard, so the plan is a single request."""
    keys = [f"user:{{42}}:{part}" for part in ("a", "b", "c", "d")]
    plan = fanout.shards_for(st, keys)
    assert list(plan.values()) == [keys]
    assert await fanout.mget(st.topology, keys) == [None] * 4


async def test_decode_returns_payloads(st: Stampede) -> None:
    """decode=True unwraps stamped values to payloads; mget_envelopes keeps the stamps."""
    keys = spread_keys(st, "doc", 3)
    receipt = await st.write("doc", {k: f"p-{k}" for k in keys})
    assert await fanout.mget(st, keys, decode=True) == [f"p-{k}".encode() for k in keys]
    envelopes = await fanout.mget_envelopes(st, [*keys, "doc:missing"])
    assert [e.token if e else None for e in envelopes] == [receipt.token] * 3 + [None]
    assert await fanout.mget_map(st, keys[:1], decode=True) == {keys[0]: f"p-{keys[0]}".encode()}


async def test_decode_refuses_plain_values(st: Stampede) -> None:
    """A value that is not an envelope fails decode with MalformedEnvelope naming the key."""
    await st.topology.execute(b"plain:1", "SET", "plain:1", "hello")
    with pytest.raises(MalformedEnvelope, match="plain:1") as info:
        await fanout.mget(st, ["plain:1"], decode=True)
    assert "hello" not in str(info.value)


async def test_bad_arguments_say_what_to_do(st: Stampede) -> None:
    """A lone key, a non-key or an empty key is refused with a message; [] sends nothing."""
    with pytest.raises(TypeError, match="wrap it"):
        await fanout.mget(st, "user:1")
    with pytest.raises(InvalidKeyError, match="key #1 is a int"):
        await fanout.mget(st, ["a", 7])  # type: ignore[list-item]
    with pytest.raises(InvalidKeyError, match="key #0 is empty"):
        await fanout.mget(st, [b""])
    assert await fanout.mget(st, []) == []


async def test_keys_as_a_generator_or_of_the_wrong_kind(st: Stampede) -> None:
    """A generator of keys is read once: mget_map and shards_for zipped it after it was
    used up and raised ValueError (mget_map after its round trip). A lone key or None is
    a StampedeError (InvalidValueError, still a TypeError), not a bare TypeError."""
    await st.topology.execute(b"gen:a", "SET", "gen:a", "1")
    assert await fanout.mget_map(st, (k for k in ["gen:a", "gen:b"])) == {  # type: ignore[arg-type,comparison-overlap]
        "gen:a": b"1",
        "gen:b": None,
    }
    plan = fanout.shards_for(st, (k for k in ["gen:a", "gen:b"]))  # type: ignore[arg-type]
    assert sorted(k for keys in plan.values() for k in keys) == ["gen:a", "gen:b"]  # type: ignore[comparison-overlap]
    with pytest.raises(InvalidValueError, match=r"mget_map\(\) takes a sequence of keys, not"):
        await fanout.mget_map(st, "gen:a")
    with pytest.raises(InvalidValueError, match=r"mget\(\) takes a sequence of keys, got NoneType"):
        await fanout.mget(st, None)  # type: ignore[arg-type]


async def test_unreachable_shard_is_named() -> None:
    """A shard that cannot be reached fails the read with ShardUnavailable naming it."""
    dead = stampede.connect(
        ["redis://127.0.0.1:1"],
        connection=stampede.ConnectOptions(connect_timeout=0.2, connection_retries=0),
    )
    with pytest.raises(ShardUnavailable, match=r"127\.0\.0\.1:1\b"):
        await fanout.mget(dead, ["a", "b"])
    await dead.aclose()
