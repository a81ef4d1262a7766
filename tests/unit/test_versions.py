"""Version sources: the hybrid clock's resolution, bounds and refusals."""

from __future__ import annotations

import time

import pytest

from stampede import ConfigurationError, HybridClock
from stampede.wire import CLOCK_FLOOR, MAX_VERSION, VersionKind, kind_of

SECOND = 1_000_000_000
NOW = 1_760_000_000 * SECOND  # a fixed wall-clock reading, in ns


def test_hybrid_clock_counts_nanoseconds() -> None:
    """A version is the wall clock in ns; within one reading it counts up by one."""
    clock = HybridClock(clock=lambda: NOW)
    first, second = clock.now(), clock.now()
    assert first == NOW and second == NOW + 1
    assert HybridClock.physical_ms(second) == NOW // 1_000_000
    assert kind_of(first) is VersionKind.CLOCK


def test_sequential_writers_in_one_millisecond_are_ordered() -> None:
    """Two clocks reading one wall clock order writes made one after the other, even
    within a millisecond: the later write gets the larger version."""
    wall = [NOW]
    a, b = HybridClock(clock=lambda: wall[0]), HybridClock(clock=lambda: wall[0])
    first = a.now()
    wall[0] += 1_000  # one microsecond later
    assert b.now() > first


def test_hybrid_clock_never_goes_backwards() -> None:
    """A wall clock that steps back does not make versions go back."""
    now = [NOW]
    clock = HybridClock(clock=lambda: now[0])
    before = clock.now()
    now[0] = NOW - SECOND
    assert clock.now() > before


def test_hybrid_clock_offset_and_observe() -> None:
    """An injected offset skews the clock; observing a newer version moves past it."""
    skewed = HybridClock(clock=lambda: NOW, offset_ms=-500)
    assert skewed.now() == NOW - 500 * 1_000_000
    skewed.observe(NOW + SECOND // 2)
    assert skewed.now() > NOW + SECOND // 2
    assert skewed.refused == 0


def test_a_poisoned_version_is_refused_and_never_wedges_the_clock() -> None:
    """Observing 2**63-1 (another program's value) is refused and reported; the clock
    goes on giving versions from its own time instead of overflowing."""
    clock = HybridClock(clock=lambda: NOW)
    clock.observe(MAX_VERSION)
    assert clock.refused == 1 and clock.last_refused == MAX_VERSION
    assert clock.now() == NOW


def test_a_clock_a_year_ahead_does_not_spread() -> None:
    """A version a year ahead is refused; one within max_offset is adopted."""
    clock = HybridClock(clock=lambda: NOW, max_offset=1.0)
    clock.observe(NOW + 365 * 24 * 3600 * SECOND)
    assert clock.refused == 1 and clock.now() < NOW + SECOND
    clock.observe(NOW + SECOND // 2)
    assert clock.refused == 1 and clock.now() > NOW + SECOND // 2


def test_sequence_versions_do_not_move_the_clock() -> None:
    """A Counter's or an application's version says nothing about time."""
    clock = HybridClock(clock=lambda: NOW)
    clock.observe(CLOCK_FLOOR - 1)
    assert clock.now() == NOW and clock.refused == 0


def test_bad_max_offset_and_insane_clock_are_configuration_errors() -> None:
    """A non-positive max_offset, or a clock outside 1972..2262, fails clearly."""
    with pytest.raises(ConfigurationError, match="max_offset"):
        HybridClock(max_offset=0)
    for bad in (float("inf"), float("nan"), 10**9, "5"):
        with pytest.raises(ConfigurationError, match="max_offset"):
            HybridClock(max_offset=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="clock source"):
        HybridClock(clock=lambda: 5).now()


def test_stamp_is_now_and_its_limit() -> None:
    """`stamp()` (the write path's) is `now()` and `max(version, horizon())`, from one
    reading: same versions as `now()`, the same refusal of an insane clock."""
    wall = [NOW]
    a, b = HybridClock(clock=lambda: wall[0]), HybridClock(clock=lambda: wall[0])
    for step in (0, 0, 5, -SECOND, 0, 2 * SECOND):
        wall[0] += step
        version, limit = a.stamp()
        assert version == b.now()
        assert limit == max(version, b.horizon())
    a.observe(wall[0] + 3 * SECOND)  # a version ahead (within max_offset) moves it on
    version, limit = a.stamp()
    assert version == wall[0] + 3 * SECOND + 1
    assert limit == wall[0] + a.max_offset_ns
    with pytest.raises(ConfigurationError, match="clock source"):
        HybridClock(clock=lambda: 5).stamp()


def test_default_clock_is_the_wall_clock() -> None:
    """Without a clock argument, versions follow time.time_ns()."""
    before = time.time_ns()
    version = HybridClock().now()
    assert before <= version <= time.time_ns() + 1000


def test_a_refused_version_is_logged_on_the_versions_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """stamps.md: a version read more than max_offset ahead is counted in `refused` and
    logged as a warning on the `stampede.versions` logger."""
    clock = HybridClock(clock=lambda: NOW, max_offset=5.0)
    with caplog.at_level("WARNING", logger="stampede.versions"):
        clock.observe(NOW + 6 * SECOND)
    assert clock.refused == 1
    assert [r.name for r in caplog.records if r.levelname == "WARNING"] == ["stampede.versions"]
