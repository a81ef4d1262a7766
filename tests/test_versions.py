"""Version sources."""

from __future__ import annotations

from stampede import HybridClock
from stampede.versions import LOGICAL_BITS


def test_hybrid_clock_carries_milliseconds_and_a_counter() -> None:
    """A version is ms << 16 plus a logical counter within the same millisecond."""
    clock = HybridClock(clock=lambda: 1_000)
    first, second = clock.now(), clock.now()
    assert first == 1_000 << LOGICAL_BITS
    assert second == first + 1
    assert HybridClock.physical_ms(second) == 1_000
    assert HybridClock.logical(second) == 1


def test_hybrid_clock_never_goes_backwards() -> None:
    """A wall clock that steps back does not make versions go back."""
    now = [5_000]
    clock = HybridClock(clock=lambda: now[0])
    before = clock.now()
    now[0] = 4_000
    assert clock.now() > before


def test_hybrid_clock_offset_and_observe() -> None:
    """An injected offset skews the clock; observing a newer version moves past it."""
    skewed = HybridClock(clock=lambda: 1_000, offset_ms=-500)
    assert HybridClock.physical_ms(skewed.now()) == 500
    skewed.observe(2_000 << LOGICAL_BITS)
    assert skewed.now() > 2_000 << LOGICAL_BITS
