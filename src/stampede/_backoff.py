"""The one backoff rule every retry in stampede sleeps by.

The n-th wait has a ceiling `min(cap, base * factor**n)` and is that ceiling less a
random part of up to `jitter` of it: `jitter=1` is "full jitter" (uniform between 0
and the ceiling; reads waiting out a write, connection retries, WATCH conflicts),
`jitter=0.5` is "equal jitter" (at least half the ceiling; the repair worker's
retries of a failed job). Full jitter spreads contending callers best; equal
jitter keeps a floor under the wait.
"""

from __future__ import annotations

import random

__all__ = ["backoff"]

_MAX_EXPONENT = 64


def backoff(
    exponent: int,
    base: float,
    cap: float,
    *,
    factor: float = 2.0,
    jitter: float = 1.0,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait: `min(cap, base * factor**exponent)` less up to `jitter` of it."""
    ceiling = min(cap, base * factor ** min(max(exponent, 0), _MAX_EXPONENT))
    return ceiling * (1.0 - jitter * (rng or random).random())
