"""WATCH-based read-modify-write of co-located groups."""

from __future__ import annotations

import asyncio

import pytest

from stampede import CrossSlotError, Envelope, HybridClock, InvalidKeyError, Stampede

KEYS = ["wallet:{7}:balance", "wallet:{7}:pending"]


async def test_cross_slot_update_fails_before_sending(st: Stampede) -> None:
    """Keys in different slots raise CrossSlotError naming their slots; nothing is written."""
    keys = ["wallet:1:balance", "wallet:2:balance"]
    with pytest.raises(CrossSlotError) as info:
        await st.update("wallet", keys, lambda cur: dict.fromkeys(cur, b"0"))
    assert set(info.value.slots) == {k.encode() for k in keys}
    assert "slot" in str(info.value)
    for key in keys:
        assert await st.topology.execute(key.encode(), "EXISTS", key) == 0


async def test_concurrent_updates_lose_nothing(st: Stampede) -> None:
    """Twenty racing increments under WATCH all count, and the group stays consistent."""
    await st.write("wallet:{7}", dict.fromkeys(KEYS, b"0"))

    def bump(cur: dict[str, bytes | None]) -> dict[str, bytes]:
        balance = int(cur[KEYS[0]] or b"0") + 1
        return {KEYS[0]: str(balance).encode(), KEYS[1]: str(balance * 10).encode()}

    await asyncio.gather(
        *(st.update("wallet:{7}", KEYS, bump, max_attempts=200) for _ in range(20))
    )
    result = await st.read("wallet:{7}", KEYS)
    assert result.consistent
    assert result.values == {KEYS[0]: b"20", KEYS[1]: b"200"}


async def test_update_orders_after_stored_versions(st: Stampede) -> None:
    """An update's version is newer than what it replaced, so the guard still orders it
    (here the stored write's clock ran half a second ahead of the updater's)."""
    ahead = HybridClock(offset_ms=500)
    old = await st.write("wallet:{7}", dict.fromkeys(KEYS, b"1"), versions=ahead)
    receipt = await st.update("wallet:{7}", KEYS, lambda cur: dict.fromkeys(cur, b"2"))
    assert receipt.version > old.version and receipt.atomic
    raw = await st.topology.execute(KEYS[0].encode(), "GET", KEYS[0])
    assert Envelope.decode(raw).token == receipt.token


async def test_update_in_commit_mode_writes_the_record(st: Stampede) -> None:
    """A commit-mode update sets data and record in one transaction."""
    receipt = await st.update(
        "wallet:{7}", KEYS, lambda cur: dict.fromkeys(cur, b"5"), mode="commit"
    )
    result = await st.read("wallet:{7}", KEYS, mode="commit")
    assert result.consistent and result.token == receipt.token


async def test_update_of_untagged_group_in_commit_mode_is_cross_slot(st: Stampede) -> None:
    """In commit mode the record must share the slot too, or the update is refused."""
    with pytest.raises(CrossSlotError, match="stampede:commit"):
        await st.update("wallet", KEYS, lambda cur: dict.fromkeys(cur, b"5"), mode="commit")


async def test_update_function_must_cover_every_key(st: Stampede) -> None:
    """An update function that drops a key is an error, and nothing is written."""
    with pytest.raises(InvalidKeyError, match="no value"):
        await st.update("wallet:{7}", KEYS, lambda cur: {KEYS[0]: b"1"})
    assert await st.topology.execute(KEYS[0].encode(), "EXISTS", KEYS[0]) == 0
