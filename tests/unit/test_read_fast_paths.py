"""The read path's fast paths give what the plain ways give.

- `decode_all` (a value that repeats the stamp before it is not parsed again) gives
  what `Envelope.decode` gives, value by value, and fails where it fails;
- `judge`'s one-pass common case gives what the full table (`_judged`) gives;
- `ReadResult.judged` builds the same result as the dataclass's constructor;
- `FetchPlans` hands `fetch_parts` the same plan each time, the first time included,
  and a plan's `order` puts the parts' values where the positions put them;
- `stamped` builds the same observation as the constructor; `live_write` finds a
  consistent group only where `judge` does, and `_live` the result `_whole` gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede import Envelope, Mode
from stampede._read import _live, _whole
from stampede.errors import MalformedEnvelope
from stampede.results import ReadResult
from stampede.topology import _plan
from stampede.topology._plan import _gathered, _order
from stampede.verdict import Observation, Status, Verdict, _judged, judge, live_write, stamped
from stampede.wire._envelope import decode_all

A = "01JD0000000000000000000000"
B = "01JD0000000000000000000001"

# Values that share stamps, tombstones, near-misses of a stamp (a longer version, a
# longer token, no colon after it) and things that are no envelope at all.
VALUES = [
    Envelope(7, A, b"x").encode(),
    Envelope(7, A, b"").encode(),
    Envelope(7, A, b"a:b:c").encode(),
    Envelope(7, A, tombstone=True).encode(),
    Envelope(7, B, b"x").encode(),
    Envelope(70, A, b"x").encode(),
    Envelope(2**60, A, b"y").encode(),
    b"7:" + A.encode() + b"Z",
    b"7:" + A.encode() + b"Z:x",
    b"7:" + A.encode() + b"x",
    b"07:" + A.encode() + b":x",
    b"plain",
    b"",
]


def decoded_one_by_one(raws: list[bytes | None]) -> list[Envelope | None] | None:
    try:
        return [None if raw is None else Envelope.decode(raw) for raw in raws]
    except MalformedEnvelope:
        return None


def fields(env: Envelope | None) -> Any:
    if env is None:
        return None
    return (env.version, env.token, env.payload, env.tombstone, type(env.payload))


@given(st.lists(st.one_of(st.none(), st.sampled_from(VALUES), st.binary(max_size=40))))
def test_decode_all_is_decode_value_by_value(raws: list[bytes | None]) -> None:
    expected = decoded_one_by_one(raws)
    if expected is None:
        with pytest.raises(MalformedEnvelope):
            decode_all(raws)
        return
    got = decode_all(raws)
    assert [fields(e) for e in got] == [fields(e) for e in expected]
    assert got == expected


class Raw(bytes):
    """bytes of another type (what a client library might hand over)."""


def test_decode_all_takes_other_bytes_types_as_decode_does() -> None:
    raw = Envelope(7, A, b"x").encode()
    assert decode_all([raw, Raw(raw), Raw(raw)]) == [Envelope.decode(raw)] * 3
    assert type(decode_all([raw, Raw(raw)])[1].payload) is bytes  # type: ignore[union-attr]
    for other in (bytearray(raw), memoryview(raw)):
        # refused alike (MalformedEnvelope pure; a compiled build's TypeError at the call)
        with pytest.raises((MalformedEnvelope, TypeError)) as refused:
            Envelope.decode(other)  # type: ignore[arg-type]
        with pytest.raises(refused.type):
            decode_all([raw, other])  # type: ignore[list-item]


@given(
    st.lists(st.one_of(st.none(), st.sampled_from(VALUES)), min_size=1, max_size=5),
    st.sampled_from([Mode.STAMP, Mode.COMMIT]),
    st.one_of(st.none(), st.sampled_from(VALUES)),
)
def test_judge_is_the_full_table(
    raws: list[bytes | None], mode: Mode, commit: bytes | None
) -> None:
    keys = tuple(f"k:{i}".encode() for i in range(len(raws)))
    obs = Observation(b"g", keys, tuple(raws), mode, commit)
    assert judge(obs) == _judged(obs)


def test_judge_of_no_keys_is_the_full_table() -> None:
    obs = Observation(b"g", (), ())
    assert judge(obs) == _judged(obs)
    assert judge(obs).status is Status.NOT_FOUND


def test_the_fast_consistent_verdict_is_the_plain_one() -> None:
    raw = Envelope(7, A, b"x").encode()
    obs = Observation(b"g", (b"a", b"b"), (raw, raw))
    fast = judge(obs)
    assert fast == _judged(obs)
    assert fast.status is Status.CONSISTENT and fast.envelope == Envelope(7, A, b"x")
    assert repr(fast) == repr(_judged(obs))


def test_read_result_judged_is_the_constructor() -> None:
    obs = Observation(b"g", (b"a",), (Envelope(7, A, b"x").encode(),))
    made = ReadResult[str].judged(b"g", Status.CONSISTENT, {"a": b"x"}, 7, A, 2, None, obs)
    plain = ReadResult(b"g", Status.CONSISTENT, {"a": b"x"}, 7, A, 2, None, observation=obs)
    assert made == plain and repr(made) == repr(plain)
    assert made.observation is obs and made.repair is None
    assert (made.repaired, made.queued) == (False, False)


async def test_fetch_plans_keep_the_plan_of_a_tuple(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []

    async def fetch_parts(*args: Any) -> list[bytes | None]:
        seen.append(args)
        return []

    monkeypatch.setattr(_plan, "fetch_parts", fetch_parts)
    made: list[Any] = []
    coalescers = [object(), object()]

    def plan(keys: Any) -> tuple[list[Any], list[str]]:
        made.append(keys)
        return [(coalescers[0], [0, 2]), (coalescers[1], [1])], ["s0", "s1"]

    plans = _plan.FetchPlans(plan, limit=2)
    keys = (b"a", b"b", b"c")
    for _ in range(3):
        await plans.fetch(keys)
    await plans.fetch(list(keys))  # a list is planned every time
    await plans.fetch(list(keys))
    assert made == [keys, list(keys), list(keys)]
    for args in seen:
        assert args[2] == ["s0", "s1"] and args[3] == [[b"a", b"c"], [b"b"]]
    assert seen[0][1] is seen[2][1]  # the same plan again
    for other in [(b"x", b"y", b"z"), (b"y", b"z", b"x")]:  # past the limit: it starts again
        await plans.fetch(other)
    await plans.fetch(keys)
    assert made[-1] == keys


@given(st.lists(st.one_of(st.none(), st.sampled_from(VALUES)), max_size=6))
def test_stamped_is_the_constructor(raws: list[bytes | None]) -> None:
    keys = tuple(f"k:{i}".encode() for i in range(len(raws)))
    made, plain = stamped(b"g", keys, raws), Observation(b"g", keys, tuple(raws))
    assert repr(made) == repr(plain) and made.envelopes == plain.envelopes
    assert {k: str(e) for k, e in made.errors.items()} == {
        k: str(e) for k, e in plain.errors.items()
    }
    if not plain.errors:  # (exceptions compare by identity)
        assert made == plain
    assert (made.mode, made.commit_raw, type(made.raw)) == (Mode.STAMP, None, tuple)
    with pytest.raises(ValueError, match="1 keys but 2 values"):
        stamped(b"g", (b"a",), [None, None])


@given(
    st.lists(st.one_of(st.none(), st.sampled_from(VALUES)), min_size=1, max_size=5),
    st.sampled_from([Mode.STAMP, Mode.COMMIT]),
)
def test_live_write_is_judges_consistent_case(raws: list[bytes | None], mode: Mode) -> None:
    keys = tuple(f"k:{i}".encode() for i in range(len(raws)))
    obs = Observation(b"g", keys, tuple(raws), mode)
    env = live_write(obs)
    if env is None:
        return
    assert judge(obs) == Verdict(Status.CONSISTENT, None, env)
    names = [f"n{i}" for i in range(len(raws))]
    live, whole = _live(names, obs, env, None), _whole(names, obs, judge(obs), 1, None)
    assert live == whole and repr(live) == repr(whole) and live.observation is obs


@given(st.lists(st.integers(0, 3), min_size=2, max_size=9))
def test_a_plans_order_puts_each_value_at_its_keys_place(shards: list[int]) -> None:
    keys = tuple(f"k:{i}".encode() for i in range(len(shards)))
    by: dict[int, list[int]] = {}
    for pos, shard in enumerate(shards):
        by.setdefault(shard, []).append(pos)
    parts: list[Any] = [(None, positions) for positions in by.values()]
    results = [[keys[p] + b"!" for p in positions] for positions in by.values()]
    order = _order(parts)
    if len(parts) < 2:
        assert order is None
        return
    want = [key + b"!" for key in keys]
    assert _gathered(keys, parts, results, order) == want
    assert _gathered(keys, parts, results, None) == want
    failed = [*results[:-1], ValueError("down")]
    with pytest.raises(ValueError, match="down"):
        _gathered(keys, parts, failed, order)
