"""Judging one group read (the table in `stampede.verdict`)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from stampede import Envelope, Mode, Reason, Status
from stampede.verdict import Observation, judge

A = "01JD0000000000000000000000"
B = "01JD0000000000000000000001"
KEYS = (b"u:{1}:profile", b"u:{1}:settings")


def env(version: int, token: str, payload: bytes = b"p") -> bytes:
    return Envelope(version, token, payload).encode()


def record(version: int, token: str, keys: tuple[bytes, ...] = KEYS) -> bytes:
    return env(version, token, json.dumps([k.decode() for k in keys]).encode())


def obs(*raw: bytes | None, mode: Mode = Mode.STAMP, commit: bytes | None = None) -> Observation:
    return Observation(b"u:{1}", KEYS, tuple(raw), mode, commit)


def test_one_token_everywhere_is_consistent() -> None:
    """Every key stamped with one token is consistent, and the verdict carries it."""
    verdict = judge(obs(env(3, A), env(3, A)))
    assert verdict.status is Status.CONSISTENT
    assert verdict.envelope is not None and verdict.envelope.token == A


def test_nothing_at_all_is_not_found() -> None:
    """A group with no key at all is not found, not torn."""
    assert judge(obs(None, None)).status is Status.NOT_FOUND
    assert judge(obs(None, None, mode=Mode.COMMIT)).status is Status.NOT_FOUND


def test_mixed_tokens_are_in_flight_then_torn() -> None:
    """Different tokens read as in flight; once retries run out, torn."""
    verdict = judge(obs(env(3, A), env(4, B)))
    assert (verdict.status, verdict.reason) == (Status.IN_FLIGHT, Reason.TORN)
    assert verdict.exhausted().status is Status.TORN


def test_missing_keys_are_partial() -> None:
    """Some keys missing reads as in flight with reason partial."""
    verdict = judge(obs(env(3, A), None))
    assert (verdict.status, verdict.reason) == (Status.IN_FLIGHT, Reason.PARTIAL)


def test_unstamped_value_is_torn_at_once() -> None:
    """A plain value cannot be waited out: torn (unstamped), with the decode error kept."""
    o = obs(env(3, A), b"plain")
    verdict = judge(o)
    assert (verdict.status, verdict.reason) == (Status.TORN, Reason.UNSTAMPED)
    assert KEYS[1] in o.errors
    assert o.seen() == {"u:{1}:profile": f"3:{A}", "u:{1}:settings": "unstamped"}


def test_commit_mode_needs_the_matching_record() -> None:
    """In commit mode whole data without its record (or with an older one) is uncommitted."""
    data = (env(3, A), env(3, A))
    assert judge(obs(*data, mode=Mode.COMMIT, commit=record(3, A))).consistent
    for rec in (None, record(2, B), record(4, B), b"garbage"):
        verdict = judge(obs(*data, mode=Mode.COMMIT, commit=rec))
        assert (verdict.status, verdict.reason) == (Status.IN_FLIGHT, Reason.UNCOMMITTED)


def test_commit_record_must_cover_the_keys_read() -> None:
    """A record naming fewer keys than were read does not vouch for them."""
    rec = record(3, A, keys=KEYS[:1])
    verdict = judge(obs(env(3, A), env(3, A), mode=Mode.COMMIT, commit=rec))
    assert verdict.reason is Reason.PARTIAL


def test_record_without_data_is_not_found() -> None:
    """A commit record that outlived its data (it expired, or was deleted) vouches for
    nothing: the group is not found, not torn forever."""
    verdict = judge(obs(None, None, mode=Mode.COMMIT, commit=record(3, A)))
    assert verdict.status is Status.NOT_FOUND


def tomb(version: int, token: str) -> bytes:
    return Envelope(version, token, tombstone=True).encode()


def test_tombstones_read_as_not_found_in_both_modes() -> None:
    """A completed delete (every key a tombstone) is not found; its stamp is kept."""
    verdict = judge(obs(tomb(5, B), tomb(5, B)))
    assert verdict.status is Status.NOT_FOUND and verdict.consistent is False
    assert verdict.envelope is not None and verdict.envelope.token == B
    committed = judge(obs(tomb(5, B), tomb(5, B), mode=Mode.COMMIT, commit=record(5, B)))
    assert committed.status is Status.NOT_FOUND


def test_delete_in_flight_over_live_data_is_in_flight() -> None:
    """A delete that reached one key of a live group is a write in flight."""
    verdict = judge(obs(tomb(5, B), env(3, A)))
    assert verdict.status is Status.IN_FLIGHT and verdict.reason is Reason.TORN


def test_stamp_mode_ignores_the_record() -> None:
    """Stamp mode judges the data alone."""
    assert judge(obs(env(3, A), env(3, A), commit=None)).consistent


values = st.one_of(
    st.none(), st.binary(max_size=40), st.builds(env, st.integers(0, 9), st.sampled_from([A, B]))
)


@given(values, values, st.one_of(st.none(), st.binary(max_size=60)), st.sampled_from(Mode))
def test_judge_is_total(a: bytes | None, b: bytes | None, commit: bytes | None, mode: Mode) -> None:
    """Any bytes at all produce a verdict, never an exception; consistent means one token."""
    verdict = judge(Observation(b"g", KEYS, (a, b), mode, commit))
    if verdict.consistent:
        assert a is not None and b is not None
        assert Envelope.decode(a).token == Envelope.decode(b).token
