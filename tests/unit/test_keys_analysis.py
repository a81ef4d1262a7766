"""Slot analysis: counts per slot and shard, hottest slots, skew."""

from __future__ import annotations

import dataclasses
import json
from itertools import count

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stampede.errors import ConfigurationError
from stampede.keys import (
    SLOTS,
    HashPolicy,
    SlotCount,
    SlotCounter,
    SlotMap,
    analyze,
    keyslot,
)


def keys_on(slot_map: SlotMap, shard: int, n: int, prefix: str = "k") -> list[str]:
    """`n` distinct untagged keys that `slot_map` puts on `shard`."""
    found = []
    for i in count():
        key = f"{prefix}:{i}"
        if slot_map.shard_of(keyslot(key)) == shard:
            found.append(key)
            if len(found) == n:
                return found
    raise AssertionError("unreachable")  # pragma: no cover


def test_even_split_counts_and_skew() -> None:
    """6, 3 and 0 keys on three even shards: mean 3, skew 2.0, shard 2 empty."""
    slot_map = SlotMap.even(3)
    keys = keys_on(slot_map, 0, 6) + keys_on(slot_map, 1, 3)
    result = analyze(keys, shards=3)
    assert result.total == 9
    assert result.shards == 3
    assert result.shard_counts == (6, 3, 0)
    assert result.mean == 3.0
    assert result.skew == 2.0
    assert result.hottest_shard == 0
    assert result.empty_shards == (2,)
    assert result.slot_map == slot_map
    assert result.tagged == 0


def test_explicit_slot_map() -> None:
    """An explicit SlotMap decides which shard each slot's keys count for."""
    slot_map = SlotMap.from_ranges({0: [(0, 99)], 1: [(100, SLOTS - 1)]})
    keys = keys_on(slot_map, 0, 2) + keys_on(slot_map, 1, 6)
    result = analyze(keys, shards=slot_map)
    assert result.shard_counts == (2, 6)
    assert result.skew == 1.5
    assert result.hottest_shard == 1
    assert result.empty_shards == ()


def test_one_hot_tag_gives_maximal_skew() -> None:
    """Every key in one tag: one shard holds all, skew equals the shard count."""
    result = analyze([f"cart:{{global}}:{i}" for i in range(40)], shards=4)
    assert result.skew == 4.0
    assert result.tagged == 40
    assert result.occupied_slots == 1
    (hot,) = result.hottest
    assert hot == SlotCount(keyslot("global"), 40, result.hottest_shard, b"cart:{global}:0")
    assert len(result.empty_shards) == 3


def test_hottest_slots_ranked_with_examples() -> None:
    """Hottest slots come most keys first, ties by slot, each with the first key seen there."""
    keys = [f"user:{{7}}:{i}" for i in range(5)] + [f"user:{{8}}:{i}" for i in range(3)]
    singles = [f"solo:{i}" for i in range(20)]
    result = analyze(keys + singles, shards=3, top=4)
    assert [(h.slot, h.count) for h in result.hottest[:2]] == [(keyslot("7"), 5), (keyslot("8"), 3)]
    assert result.hottest[0].example == b"user:{7}:0"
    rest = result.hottest[2:]
    assert all(h.count == 1 for h in rest) and rest[0].slot < rest[1].slot
    assert all(h.shard == result.slot_map.shard_of(h.slot) for h in result.hottest)
    assert analyze(keys, top=0).hottest == ()
    assert len(analyze(keys + singles).hottest) == 10


def test_no_keys() -> None:
    """An empty sample: zero totals, skew 1.0, every shard empty, no hot slots."""
    result = analyze([], shards=2)
    assert (result.total, result.occupied_slots, result.hottest) == (0, 0, ())
    assert result.skew == 1.0
    assert result.empty_shards == (0, 1)
    assert result.hottest_shard == 0


def test_policy_groups_keys() -> None:
    """With a HashPolicy, keys count where the policy hashes them."""
    policy = HashPolicy(r"order:(?P<tag>\d+):")
    keys = [f"order:9:{part}" for part in ("a", "b", "c")] + ["plain", "user:{1}:x"]
    result = analyze(keys, policy=policy, shards=2)
    assert result.hottest[0].slot == keyslot("9") and result.hottest[0].count == 3
    assert result.tagged == 4
    assert result.occupied_slots == 3


def test_counter_accumulates_batches() -> None:
    """A SlotCounter fed in batches (as SCAN feeds it) gives the same result as analyze."""
    keys: list[bytes | str] = [f"k:{i}" for i in range(300)] + [b"\xff{x}", b"user:{1}"]
    counter = SlotCounter(shards=5)
    for start in range(0, len(keys), 64):
        counter.update(keys[start : start + 64])
    assert counter.total == len(keys)
    assert counter.result(top=5) == analyze(keys, shards=5, top=5)
    assert counter.add("extra") == keyslot("extra")
    assert counter.total == len(keys) + 1
    assert SlotCounter(policy=HashPolicy(r"(?P<tag>k)")).add("k:1") == keyslot("k")


@given(st.lists(st.binary(max_size=12) | st.text(max_size=12)), st.integers(1, 64))
def test_counts_always_add_up(keys: list[bytes | str], shards: int) -> None:
    """Shard counts sum to the total, and the skew is between 1 and the shard count."""
    keys = [
        k for k in keys if not isinstance(k, str) or not any(0xD800 <= ord(c) < 0xE000 for c in k)
    ]
    result = analyze(keys, shards=shards, top=3)
    assert sum(result.shard_counts) == result.total == len(keys)
    assert 1.0 <= result.skew <= shards + 1e-9
    assert result.occupied_slots == len({keyslot(k) for k in keys})


def test_to_dict_is_json_ready() -> None:
    """to_dict has the figures and shows keys as escaped text."""
    result = analyze([b"\xff:{1}", "a:{1}", "b"], shards=2, top=1)
    data = result.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["total"] == 3 and data["tagged"] == 2
    assert [s["keys"] for s in data["shards"]] == list(result.shard_counts)
    assert data["shards"][0]["slots"] == [[0, 8191]]
    assert data["hottest_slots"] == [
        {"slot": keyslot("1"), "keys": 2, "shard": 1, "example": "\\xff:{1}"}
    ]
    assert data["skew"] == round(result.skew, 4)


def test_results_are_frozen_and_options_checked() -> None:
    """Distribution is frozen; bad shard counts and negative top are ConfigurationErrors."""
    result = analyze(["a"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.total = 2  # type: ignore[misc]
    for bad in (0, True, "3"):
        with pytest.raises(ConfigurationError):
            analyze(["a"], shards=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="top must be 0 or more"):
        analyze(["a"], top=-1)
