"""The guarded write's requests: their ARGV, a batch's joined call, the codes split back.

Pure functions of `stampede.topology._guard`, compiled in a `STAMPEDE_COMPILE=1`
build: `make test-compiled` runs these on the extension, `make test` on the `.py`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stampede.errors import ShardError, ShardResponseError, ShardUnavailable
from stampede.topology._guard import (
    GUARD_SHA,
    KEEP_MS,
    STAMP_ARGS,
    WRITTEN,
    WRONGTYPE,
    WriteRequest,
    argv_at,
    joined,
    requests_for,
    split_codes,
    without_keeping,
)
from stampede.typing import GuardStamp

KEYS = [b"a", b"b", b"c", b"d"]
VALUES = [b"va", b"vb", b"vc", b"vd"]
STAMP: GuardStamp = {"version": 12, "token": "tok", "expire_at_ms": 99, "limit": 7, "keep_ms": 0}


def test_a_request_holds_its_stamp_once_then_a_value_per_key_in_order() -> None:
    request = WriteRequest.build(KEYS, VALUES, [2, 0], [5, 6, 7, 8], **STAMP)
    assert type(request) is WriteRequest
    assert request.keys == [b"c", b"a"]
    assert request.slots == [7, 5]
    assert len(request) == 2
    assert request.argv == [12, "tok", 99, 7, 0, b"vc", b"va"]
    assert len(request.argv) == STAMP_ARGS + len(request)


def test_a_bare_stamp_means_no_expiry_no_limit_and_the_default_keeping() -> None:
    request = WriteRequest.build(KEYS, VALUES, [1], (), version=3, token="t", expire_at_ms=None)
    assert request.argv == [3, "t", 0, 0, KEEP_MS, b"vb"]
    assert request.slots == []


def test_requests_for_builds_one_request_per_part() -> None:
    parts = [[0, 3], [1], [2]]
    requests = requests_for(KEYS, VALUES, parts, (), STAMP)
    singly = [WriteRequest.build(KEYS, VALUES, p, (), **STAMP) for p in parts]
    assert [(r.keys, r.argv, r.slots) for r in requests] == [
        (r.keys, r.argv, r.slots) for r in singly
    ]


def test_a_batch_joins_its_requests_and_splits_the_codes_back() -> None:
    requests = requests_for(KEYS, VALUES, [[0, 3], [1], [2]], [1, 2, 3, 4], STAMP)
    keys, argv, slots = joined(requests)
    assert keys == [b"a", b"d", b"b", b"c"]
    assert argv == [a for r in requests for a in (len(r), *r.argv)]
    assert slots == [1, 4, 2, 3]
    lone = requests[:1]
    assert joined(lone) == (lone[0].keys, lone[0].argv, lone[0].slots)
    assert split_codes(requests, [1, 0, 2, -3], "s0") == [[1, 0], [2], [-3]]


def test_a_failed_key_fails_its_request_and_wrongtype_names_the_key() -> None:
    requests = requests_for(KEYS, VALUES, [[0, 3], [1], [2]], (), STAMP)
    down = ShardUnavailable("gone", shard="s1")
    out = split_codes(requests, [WRITTEN, WRONGTYPE, down, WRITTEN], "s1")
    assert isinstance(out[0], ShardResponseError)
    assert isinstance(out[0], ShardError)
    assert out[0].shard == "s1"
    assert "b'd'" in str(out[0]) and "WRONGTYPE" in str(out[0])
    assert out[1] is down
    assert out[2] == [WRITTEN]


def test_without_keeping_zeroes_each_writes_keep_of_a_guard_call_only() -> None:
    argv = [1, 1, "t", 0, 0, 5000, b"v", 2, 2, "u", 0, 0, 5000, b"w", b"x"]
    call = ("EVALSHA", GUARD_SHA, 3, b"k1", b"k2", b"k3", *argv)
    assert without_keeping(call) == (
        "EVALSHA", GUARD_SHA, 3, b"k1", b"k2", b"k3",
        1, 1, "t", 0, 0, 0, b"v", 2, 2, "u", 0, 0, 0, b"w", b"x",
    )  # fmt: skip
    lone = ("EVALSHA", GUARD_SHA, 2, b"k1", b"k2", 1, "t", 0, 0, 5000, b"v", b"w")
    assert without_keeping(lone) == (*lone[:9], 0, b"v", b"w")
    other = ("EVALSHA", "0" * 40, 1, b"k", *argv[1:7])
    assert without_keeping(other) is other
    assert without_keeping(("GET", b"k")) == ("GET", b"k")


def test_argv_at_gives_each_run_of_one_requests_keys_its_stamp_once() -> None:
    first = requests_for(KEYS, VALUES, [[0, 3], [1]], (), STAMP)
    other: GuardStamp = {"version": 13, "token": "u", "expire_at_ms": 0, "limit": 0, "keep_ms": 5}
    requests = [*first, *requests_for(KEYS, VALUES, [[2]], (), other)]
    # joined keys: a, d (first write), b (first write), c (other write)
    assert argv_at(requests, [0, 1]) == [12, "tok", 99, 7, 0, b"va", b"vd"]
    assert argv_at(requests, [3]) == [13, "u", 0, 0, 5, b"vc"]
    assert argv_at(requests, [1, 2, 3]) == [
        1, 12, "tok", 99, 7, 0, b"vd", 1, 12, "tok", 99, 7, 0, b"vb", 1, 13, "u", 0, 0, 5, b"vc",
    ]  # fmt: skip
    assert argv_at(requests, [0, 1, 2, 3]) == joined(requests)[1]


def _split_slowly(requests: list[WriteRequest], codes: list[Any], shard: str) -> list[Any]:
    """`split_codes` the long way round: each request's slice looked at on its own."""
    out: list[Any] = []
    pos = 0
    for request in requests:
        mine = codes[pos : pos + len(request.keys)]
        pos += len(request.keys)
        error = next((c for c in mine if isinstance(c, BaseException)), None)
        if error is not None:
            out.append(error)
        elif WRONGTYPE in mine:
            out.append(("wrongtype", request.keys[mine.index(WRONGTYPE)]))
        else:
            out.append(mine)
    return out


@settings(deadline=None)  # no timing: the machine may be busy
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=4),
    st.data(),
)
def test_split_codes_matches_the_long_way_round(sizes: list[int], data: st.DataObject) -> None:
    """Plain codes take the shortcut (slices; a lone request's codes as they are); any
    error or WRONGTYPE the long way: the same answers either way."""
    parts, at = [], 0
    for n in sizes:
        parts.append(list(range(at, at + n)))
        at += n
    keys = [b"k%d" % i for i in range(at)]
    requests = requests_for(keys, keys, parts, (), STAMP)
    down = ShardUnavailable("gone", shard="s")
    code = st.one_of(st.sampled_from([1, 2, 0, -2, -3, -4, -6, WRONGTYPE]), st.just(down))
    codes = data.draw(st.lists(code, min_size=at, max_size=at))
    got = split_codes(requests, list(codes), "s")
    expected = _split_slowly(requests, list(codes), "s")
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        if isinstance(theirs, tuple):
            assert isinstance(mine, ShardResponseError) and repr(theirs[1]) in str(mine)
        else:
            assert mine == theirs or mine is theirs
