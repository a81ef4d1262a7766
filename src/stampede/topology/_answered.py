"""`open()` in the middle of a failover: wait for the servers, as calls do.

A client opened while a primary is dead and its replica not promoted yet (the
cluster's election, Sentinel's, a DNS name not moved yet) meets a server that does
not answer. Calls wait through that for up to `ConnectOptions.failover_timeout`
seconds; so does `open()`: `answered` runs its checks again, after learning the
topology again, while the only trouble is a server that does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from .._backoff import backoff
from ..errors import SetupError, StampedeError
from ..options import ConnectOptions
from ._base import TRANSPORT_ERRORS

__all__ = ["answered"]

_PASSING = ("unreachable", "timeout")
"""The `SetupError.problem`s of a server a failover may replace; any other (its
credentials, an ACL, TLS, a replica where a primary is needed) is reported at once."""


async def answered(
    check: Callable[[], Awaitable[None]],
    again: Callable[[], Awaitable[None]],
    options: ConnectOptions,
) -> None:
    """`check()` until it passes; while it raises a `SetupError` of a server that does
    not answer, `again()` (learn the topology again: its failure is ignored) and
    `check()` again, with backoff, for up to `failover_timeout` seconds; then what
    `check()` raised."""
    deadline = time.monotonic() + options.failover_timeout
    attempt = 0
    while True:
        try:
            return await check()
        except SetupError as exc:
            if exc.problem not in _PASSING or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(backoff(attempt, options.retry_base, 0.25))
        attempt += 1
        with contextlib.suppress(StampedeError, *TRANSPORT_ERRORS):
            await again()
