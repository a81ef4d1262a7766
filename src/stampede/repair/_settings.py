"""The repair queue's settings, checked before anything is built: each out of its
range is a `ConfigurationError` naming it (a bare `ValueError` or `OverflowError`, or
a queue that misbehaves later, otherwise)."""

from __future__ import annotations

from ..errors import ConfigurationError
from ._queue_claim import MIN_IDLE

__all__ = ["check_queue", "seconds_ms"]


def seconds_ms(name: str, seconds: object) -> int:
    """`seconds` in ms, or `ConfigurationError` naming `name` (NaN, a str, a bool, below
    1 ms); infinity is taken as 10**10 s."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0.001 <= seconds:
        raise ConfigurationError(
            f"{name} must be a number of seconds, at least 0.001, got {seconds!r}"
        )
    return int(min(seconds, 10**10) * 1000)


def check_queue(
    min_idle: float, max_attempts: int, marker_ttl: float, dead_max_len: int, forget_after: float
) -> tuple[int, int]:
    """`(min_idle_ms, marker_ttl_ms)` of a `RepairQueue`, its other settings checked."""
    min_idle_ms, marker_ttl_ms = (
        seconds_ms("min_idle", min_idle),
        seconds_ms("marker_ttl", marker_ttl),
    )
    if min_idle < MIN_IDLE:
        raise ConfigurationError(
            f"min_idle must be at least {MIN_IDLE} s, got {min_idle}: a shorter one "
            "takes jobs over from workers that are alive but busy (one job repaired "
            "twice at once); it is how long a dead worker's jobs wait (30 s by default)"
        )
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError(f"max_attempts must be at least 1, got {max_attempts!r}")
    if isinstance(dead_max_len, bool) or not isinstance(dead_max_len, int) or dead_max_len < 1:
        raise ConfigurationError(f"dead_max_len must be at least 1, got {dead_max_len!r}")
    seconds_ms("forget_after", forget_after)
    return min_idle_ms, marker_ttl_ms
