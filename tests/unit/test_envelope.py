"""The `<version>:<token>:<payload>` codec."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede import Envelope, MalformedEnvelope
from stampede.wire import CLOCK_FLOOR, MAX_VERSION, VersionKind, is_token, kind_of, token_after

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
TOKEN = "01JD0000000000000000000000"

tokens = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from("01234567"),
    st.text(alphabet=CROCKFORD, min_size=25, max_size=25),
)
versions = st.integers(min_value=0, max_value=MAX_VERSION)


@given(versions, tokens, st.binary())
def test_round_trip_for_any_payload(version: int, token: str, payload: bytes) -> None:
    """Any version, token and payload bytes (colons included) survive encode/decode."""
    env = Envelope(version, token, payload)
    raw = env.encode()
    assert raw == f"{version}:{token}:".encode() + payload
    assert Envelope.decode(raw) == env


def test_payload_keeps_its_colons() -> None:
    """Only the first two colons split; the payload keeps the rest."""
    env = Envelope.decode(f"7:{TOKEN}:a:b::c".encode())
    assert (env.version, env.token, env.payload) == (7, TOKEN, b"a:b::c")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"plain value", "no colon"),
        (b"12:no-second-colon", "one colon"),
        (f"007:{TOKEN}".encode(), "leading zeros"),
        (f"{2**63}:{TOKEN}".encode(), "2**63 or more"),
        (f":{TOKEN}:x".encode(), "version is empty"),
        (f"-1:{TOKEN}:x".encode(), "not an unsigned decimal"),
        (f"+1:{TOKEN}:x".encode(), "not an unsigned decimal"),
        (f"1.5:{TOKEN}:x".encode(), "not an unsigned decimal"),
        (f"007:{TOKEN}:x".encode(), "leading zeros"),
        (f"{2**63}:{TOKEN}:x".encode(), "2**63 or more"),
        (f"{10**30}:{TOKEN}:x".encode(), "2**63 or more"),
        (f"1:{TOKEN.lower()}:x".encode(), "not upper case"),
        (b"1:01JD:x", "has 4 characters"),
        (f"1:{TOKEN}0:x".encode(), "has 27 characters"),
        (b"1:01JD000000000000000000000U:x", "not a ULID"),
        (b"1:81JD0000000000000000000000:x", "not a ULID"),
    ],
)
def test_every_other_shape_is_malformed(raw: bytes, reason: str) -> None:
    """Each non-envelope shape raises MalformedEnvelope saying what is wrong."""
    with pytest.raises(MalformedEnvelope) as info:
        Envelope.decode(raw, key=b"user:{1}:profile")
    assert reason in str(info.value)
    assert "user:{1}:profile" in str(info.value)
    assert info.value.key == b"user:{1}:profile"


@given(st.binary())
def test_decode_raises_only_malformed_and_never_echoes(raw: bytes) -> None:
    """Arbitrary bytes decode or raise MalformedEnvelope whose message holds no payload."""
    secret = b"SECRET-PAYLOAD-\xff"
    try:
        Envelope.decode(raw + secret, key="k")
    except MalformedEnvelope as exc:
        assert "SECRET" not in str(exc)


def test_max_version_is_accepted_and_the_next_is_not() -> None:
    """2**63-1 is the largest version; the constructor rejects anything outside."""
    assert Envelope.decode(f"{MAX_VERSION}:{TOKEN}:".encode()).version == MAX_VERSION
    with pytest.raises(ValueError, match="version"):
        Envelope(MAX_VERSION + 1, TOKEN)
    with pytest.raises(ValueError, match="token"):
        Envelope(1, "not-a-token")


def test_order_is_version_then_token() -> None:
    """Newer means a higher version, or the same version and a higher token."""
    a = Envelope(5, TOKEN)
    assert Envelope(6, TOKEN).newer_than(a)
    assert Envelope(5, "01JD0000000000000000000001").newer_than(a)
    assert not a.newer_than(a)


@given(tokens)
def test_is_token_accepts_ulids(token: str) -> None:
    """Every canonical ULID string is a token."""
    assert is_token(token)


def test_new_token_is_a_ulid_of_now() -> None:
    """`new_token` makes what python-ulid makes: its time part is now, the rest random."""
    import time

    from ulid import ULID

    from stampede.wire import new_token

    before = time.time()
    made = [new_token() for _ in range(2000)]
    after = time.time()
    assert len(set(made)) == len(made)
    for token in made:
        assert is_token(token)
        parsed = ULID.from_str(token)
        assert str(parsed) == token
        assert before - 0.001 <= parsed.timestamp <= after + 0.001
    # the random part uses every character of the alphabet
    assert set("".join(t[10:] for t in made)) == set(CROCKFORD)


def test_new_token_random_characters_are_uniform() -> None:
    """Each of the 32 characters of a random part is equally likely (five random bits
    each): over 1.6 million characters, every count within 4% of the mean (the
    standard deviation is under 0.5%)."""
    from collections import Counter

    from stampede.wire import new_token

    counts = Counter("".join(new_token()[10:] for _ in range(100_000)))
    assert set(counts) == set(CROCKFORD)
    assert all(48_000 <= n <= 52_000 for n in counts.values())


def test_new_token_never_repeats_across_threads() -> None:
    """The random parts drawn in bulk are each handed out once, with threads racing."""
    import threading

    from stampede.wire import new_token

    made: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        into.extend(new_token() for _ in range(3000))

    threads = [threading.Thread(target=draw, args=(m,)) for m in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    tokens = [t for m in made for t in m]
    assert len(set(tokens)) == len(tokens) == 12000
    assert len({t[10:] for t in tokens}) == 12000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_draws_other_tokens_than_its_parent() -> None:
    """A child never hands out a random part its parent drew in bulk before the fork."""
    from stampede.wire import new_token

    new_token()  # the parent now holds random parts it has not used yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, "".join(new_token()[10:] for _ in range(40)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read().decode()
    os.waitpid(pid, 0)
    child = {data[i : i + 16] for i in range(0, len(data), 16)}
    parent = {new_token()[10:] for _ in range(40)}
    assert len(child) == 40
    assert not child & parent


def test_tombstone_round_trips_and_has_no_payload() -> None:
    """A tombstone is stored as `<version>:<token>` and decodes back as a tombstone."""
    dead = Envelope(7, TOKEN, tombstone=True)
    assert dead.encode() == f"7:{TOKEN}".encode()
    back = Envelope.decode(dead.encode())
    assert back.tombstone and back.value is None and back == dead
    live = Envelope.decode(f"7:{TOKEN}:".encode())
    assert not live.tombstone and live.value == b""
    with pytest.raises(ValueError, match="no payload"):
        Envelope(7, TOKEN, b"x", tombstone=True)


def test_version_kinds_split_at_two_to_the_56() -> None:
    """0 is below both kinds; sequence versions end where clock versions begin."""
    assert kind_of(0) is VersionKind.ZERO
    assert kind_of(1) is kind_of(CLOCK_FLOOR - 1) is VersionKind.SEQUENCE
    assert kind_of(CLOCK_FLOOR) is kind_of(MAX_VERSION) is VersionKind.CLOCK


def test_token_after_near_the_top_of_the_range() -> None:
    """Tokens near the largest ULID still get a later token; the largest gets none."""
    top = "7" + "Z" * 25
    assert token_after("7" + "Z" * 24 + "Y") == top
    with pytest.raises(ValueError, match="largest ULID"):
        token_after(top)


@given(st.integers(min_value=0, max_value=2**128 - 2))
def test_token_after_sorts_after_and_is_a_token(value: int) -> None:
    """A repair's token is a valid ULID that sorts after the one it follows."""
    token = "".join(
        "0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(value >> (5 * i)) & 31] for i in reversed(range(26))
    )
    after = token_after(token)
    assert is_token(after) and after > token
    if value < 2**127:  # room for 63 random bits: two calls differ
        assert token_after(token) != after
