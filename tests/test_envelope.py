"""The `<version>:<token>:<payload>` codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede import Envelope, MalformedEnvelope
from stampede.envelope import MAX_VERSION, is_token

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
        (b"plain value", "0 colon"),
        (b"12:no-second-colon", "1 colon"),
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

    from stampede.writer import new_token

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
