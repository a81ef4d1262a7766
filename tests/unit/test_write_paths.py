"""The write path's shortcuts give the answers of the long way round.

`write_group` draws a `HybridClock`'s version without a coroutine (`stamp()`), and
checks a plain success before `raise_for`; any other version source (a subclass of
`HybridClock` included) goes through `draw_version` and `limit_for`. Each test runs
one scenario through both and compares what the writer and the store end up with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Unpack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stampede import (
    ClockSkewError,
    Counter,
    HybridClock,
    Mode,
    Options,
    OrderingError,
    Stampede,
)
from stampede._txn.units import sides_of
from stampede.keys import keyslot
from stampede.testing.faults import DelegatingTopology
from stampede.testing.memory import MemoryTopology
from stampede.topology._base import WriteOutcome
from stampede.typing import GuardStamp
from stampede.wire import Envelope
from stampede.wire._txn import side_key

SECOND = 1_000_000_000
NOW = 1_760_000_000 * SECOND


class SlowClock(HybridClock):
    """The same clock, as a subclass: `write_group` takes the long way round for it."""


class Ticking(DelegatingTopology):
    """Moves the wall clock on by `step` ns before each guarded write."""

    def __init__(self, inner: MemoryTopology, wall: list[int], step: int) -> None:
        super().__init__(inner)
        self.wall, self.step, self.calls = wall, step, 0

    async def write_guarded(
        self, keys: Any, values: Any, **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        self.calls += 1
        self.wall[0] += self.step
        return await self.inner.write_guarded(keys, values, **stamp)


def _reading(wall: list[int]) -> Callable[[], int]:
    return lambda: wall[0]


Scenario = Callable[[Stampede, list[int]], Awaitable[list[Any]]]


async def _both(scenario: Scenario, step: int = 0) -> list[list[Any]]:
    """What `scenario` saw with the fast clock and with the slow one, tokens masked."""
    seen = []
    for cls in (HybridClock, SlowClock):
        wall = [NOW]
        topology = Ticking(MemoryTopology(), wall, step)
        clock = cls(clock=_reading(wall))
        async with Stampede(topology, options=Options(versions=clock)) as st:
            seen.append([*await scenario(st, wall), topology.calls])
    return seen


def _receipt(receipt: Any) -> tuple[Any, ...]:
    return (
        receipt.version,
        receipt.keys,
        receipt.mode,
        receipt.atomic,
        receipt.superseded,
        receipt.deleted,
        dict(receipt.replicas),
        receipt.durable,
    )


async def _stored(st: Stampede, keys: list[str]) -> list[Any]:
    out = []
    for key in keys:
        raw = await st.topology.execute(key.encode(), "GET", key)
        envelope = None if raw is None else Envelope.decode(raw)
        out.append(None if envelope is None else (envelope.version, envelope.value))
    return out


KEYS = ["user:{7}:a", "user:{7}:b", "user:8:c", "user:9:d"]


async def test_plain_writes_deletes_and_commit_mode_match() -> None:
    async def scenario(st: Stampede, wall: list[int]) -> list[Any]:
        out: list[Any] = [_receipt(await st.write("user:7", dict.fromkeys(KEYS, b"v1")))]
        wall[0] += 5
        out.append(_receipt(await st.write("user:7", dict.fromkeys(KEYS[:2], "v2"))))
        out.append(_receipt(await st.write("g", {KEYS[0]: b"one"})))  # one slot: atomic
        out.append(_receipt(await st.write("user:7", dict.fromkeys(KEYS, b"c"), mode="commit")))
        out.append(_receipt(await st.delete("user:7", KEYS[2:])))
        out.append(await _stored(st, KEYS))
        return out

    fast, slow = await _both(scenario)
    assert fast == slow
    assert fast[2][3] is True and fast[0][3] is False  # atomic where one slot


async def test_superseded_keys_match() -> None:
    """A write older than what is stored is kept out, the same way on both paths."""

    async def scenario(st: Stampede, wall: list[int]) -> list[Any]:
        newer = await st.write("user:7", dict.fromkeys(KEYS[:2], b"new"))
        older = await st.write(
            "user:7", dict.fromkeys(KEYS, b"old"), versions=SlowClock(clock=lambda: NOW - 9)
        )
        return [_receipt(newer), _receipt(older), await _stored(st, KEYS)]

    fast, slow = await _both(scenario)
    assert fast == slow
    assert fast[1][4] == tuple(k.encode() for k in KEYS[:2])  # superseded there


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_refusals_match(mode: Mode) -> None:
    """A stored clock version too far ahead, and one of the other kind: the same errors."""

    async def scenario(st: Stampede, wall: list[int]) -> list[Any]:
        ahead = HybridClock(clock=lambda: NOW + 60 * SECOND)
        await st.write("user:7", dict.fromkeys(KEYS, b"ahead"), versions=ahead, mode=mode)
        out: list[Any] = []
        for error, versions in ((ClockSkewError, None), (OrderingError, Counter())):
            with pytest.raises(error) as info:
                await st.write("user:7", dict.fromkeys(KEYS, b"x"), versions=versions, mode=mode)
            out.append((type(info.value), getattr(info.value, "why", None)))
        return [*out, await _stored(st, KEYS)]

    fast, slow = await _both(scenario)
    assert fast == slow


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_a_write_held_up_past_its_limit_is_sent_again_the_same(mode: Mode) -> None:
    """A stored version just past the write's limit, and the clock moves on meanwhile:
    both paths send the write again (same stamp) under the fresh limit."""
    past = 5 * SECOND + SECOND // 2  # beyond now + max_offset (5 s), within a tick

    async def scenario(st: Stampede, wall: list[int]) -> list[Any]:
        there = HybridClock(clock=lambda: NOW + past)
        await st.write("user:7", dict.fromkeys(KEYS, b"there"), versions=there, mode=mode)
        wall[0] = NOW
        receipt = await st.write("user:7", dict.fromkeys(KEYS, b"mine"), mode=mode)
        return [_receipt(receipt), await _stored(st, KEYS)]

    fast, slow = await _both(scenario, step=SECOND)
    assert fast == slow
    assert {value for _, value in fast[1]} == {b"there"}  # kept out: the newer one stays
    assert fast[2] > (2 if mode is Mode.STAMP else 4)  # it was sent again


def test_write_plan_is_remembered_per_key_tuple(monkeypatch: pytest.MonkeyPatch) -> None:
    """`write_plan` partitions a key tuple once (a list every time), and starts over
    when it holds `PLANS_MAX` tuples; a remembered plan (the parts, and each part's
    positions) is the one worked out."""
    from stampede.topology import _plan

    calls: list[Any] = []

    def partition(keys: Any) -> dict[int, list[int]]:
        calls.append(keys)
        return {0: [0, 2], 1: [1]}

    plans: dict[tuple[bytes, ...], Any] = {}
    coalescers: list[Any] = ["c0", "c1"]
    keys = (b"a", b"b", b"c")
    first = _plan.write_plan(plans, keys, partition, coalescers)
    assert first == ([(coalescers[0], [0, 2]), (coalescers[1], [1])], [[0, 2], [1]])
    assert _plan.write_plan(plans, keys, partition, coalescers) is first
    assert _plan.write_plan(plans, list(keys), partition, coalescers) == first
    assert len(calls) == 2 and list(plans) == [keys]
    monkeypatch.setattr(_plan, "PLANS_MAX", 1)
    _plan.write_plan(plans, (b"x",), partition, coalescers)
    assert list(plans) == [(b"x",)]


def test_new_receipt_is_the_receipt_the_constructor_makes() -> None:
    """`new_receipt` (the write path's) sets every field of `Receipt`, in its order."""
    import dataclasses

    from stampede import Receipt
    from stampede.results import new_receipt

    # the setters follow `__slots__`: the fields' order
    assert Receipt.__slots__ == tuple(f.name for f in dataclasses.fields(Receipt))
    made = new_receipt(b"g", 7, "T", (b"a",), Mode.COMMIT, True, (b"a",), False, {"s0": 1}, True)
    assert made == Receipt(
        b"g", 7, "T", (b"a",), Mode.COMMIT, True, (b"a",), False, {"s0": 1}, True
    )
    assert type(made) is Receipt and made.stamp == "7:T"
    assert repr(made) == repr(
        Receipt(b"g", 7, "T", (b"a",), Mode.COMMIT, True, (b"a",), False, {"s0": 1}, True)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.version = 8  # type: ignore[misc]


@settings(deadline=None)  # no timing: the machine may be busy
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=4),
    st.data(),
    st.integers(0, 2**63 - 1),
    st.sampled_from([None, 0, 1, 1_800_000_000_000]),
    st.integers(0, 2**63 - 1),
    st.integers(0, 10**7),
)
def test_a_batch_is_sent_as_the_bytes_hiredis_makes(
    sizes: list[int], data: st.DataObject, version: int, at: int | None, limit: int, keep: int
) -> None:
    """`guard_call` joins the requests' own RESP (`WriteRequest.resp`) into the batch's
    bytes: byte for byte what `hiredis.pack_command` makes of the same command."""
    import hiredis

    from stampede.topology._encode import Packed, pack
    from stampede.topology._guard import requests_for
    from stampede.topology._shard_io import guard_call
    from stampede.wire import new_token

    parts, n = [], 0
    for size in sizes:
        parts.append(list(range(n, n + size)))
        n += size
    keys = data.draw(st.lists(st.binary(max_size=20), min_size=n, max_size=n))
    values = data.draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    stamp: GuardStamp = {"version": version, "token": new_token(), "expire_at_ms": at}
    stamp.update({"limit": limit, "keep_ms": keep})
    requests = requests_for(keys, values, parts, (), stamp)
    call = guard_call(requests)
    assert type(call) is Packed
    assert pack([call]) == hiredis.pack_command(tuple(call))
    assert tuple(call)[:3] == ("EVALSHA", call[1], n)


def test_a_request_without_plain_types_is_packed_by_hiredis() -> None:
    """A request without RESP of its own (one made by `WriteRequest(...)`, or with a
    stamp of other types) makes its batch a plain tuple, packed by hiredis as before,
    alone or with others; the tuple is the same command either way."""
    from stampede.topology._encode import Packed
    from stampede.topology._guard import WriteRequest, requests_for
    from stampede.topology._shard_io import guard_call

    stamp: GuardStamp = {"version": 5, "token": "T", "limit": 0, "keep_ms": 1}
    plain = requests_for([b"a"], [b"x"], [[0]], (), stamp)
    odd = [WriteRequest([b"b"], [5, "T", 0, 0, 1, b"y"], [])]
    assert plain[0].resp is not None and odd[0].resp is None
    assert type(guard_call(plain)) is Packed
    assert type(guard_call(odd)) is tuple
    mixed = guard_call(plain + odd)
    assert type(mixed) is tuple
    assert mixed == tuple(guard_call(plain + requests_for([b"b"], [b"y"], [[0]], (), stamp)))


async def test_one_slot_is_remembered_per_key_tuple_and_topology() -> None:
    """Whether a write's keys share one slot (a receipt's `atomic`) is worked out once
    per key tuple and topology: another topology (whose slots may differ) works it
    out again."""

    class Slots(DelegatingTopology):
        def __init__(self, slot: Callable[[bytes], int]) -> None:
            super().__init__(MemoryTopology())
            self.slot, self.asked = slot, 0

        def slot_of(self, key: bytes) -> int:
            self.asked += 1
            return self.slot(key)

    values = {"one-slot:a": b"1", "one-slot:b": b"2"}
    same, other = Slots(lambda _: 7), Slots(lambda k: k[-1])
    for topology, atomic in ((same, True), (same, True), (other, False), (other, False)):
        receipt = await Stampede(topology).write("g", values)
        assert receipt.atomic is atomic
    assert same.asked == other.asked == 2  # each topology's answer remembered
    assert (await Stampede(same).write("g", values)).atomic  # the other's is not taken
    assert same.asked == 4


def test_version_hashes_are_remembered_per_topology() -> None:
    """`sides_of` gives each key's `side_key` under the topology asked, remembered per
    topology: another topology (another hashing of keys) gets its own."""
    keys = [b"a", b"b{x}", b"{c}d", b"{}e", b"u:{42}:name"]

    class Folded(MemoryTopology):  # every key in slot 7: the anchored names differ
        def slot_of(self, key: bytes) -> int:
            return 7 if b"stampede:v:{" not in key else keyslot(key)

    plain, folded = MemoryTopology(), Folded()
    for _ in range(2):  # worked out, then remembered
        for topology in (plain, folded, plain):
            assert sides_of(topology, keys) == [side_key(k, topology.slot_of) for k in keys]
    assert sides_of(plain, keys) != sides_of(folded, keys)
