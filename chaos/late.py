"""Late sends: the part of a write that a `delay` fault holds, or a `retry` resends.

`FaultyTopology` builds a `Late` for the guarded-write call it injects a fault
into. `hold` (style `delay`) keeps the unsent rest back for `late_after` seconds
while the writer waits, then sends it; `resend` (style `retry`) sends the whole
call again, with its stamp, `late_after` seconds after the writer was told it
failed. Both record `fault` events: `hold` (what is held), `late-send` (when it
goes out) and `late-sent` (the guard's answer per key).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stampede.topology._base import WriteOutcome

from .history import OpContext, text

if TYPE_CHECKING:
    from .faults import FaultyTopology

__all__ = ["Late"]


@dataclass
class Late:
    """One guarded-write call whose part (`delay`) or whole (`retry`) is sent late."""

    topology: FaultyTopology
    ctx: OpContext
    keys: Sequence[bytes]
    values: Sequence[bytes]
    version: int
    token: str
    expire_at_ms: int | None
    limit: int

    def _fault(self, kind: str, which: Sequence[int], **fields: Any) -> None:
        history = self.topology.history
        if history is not None:
            keys = sorted(text(self.keys[i]) for i in which)
            history.fault(kind, write=self.ctx.op, group=text(self.ctx.group), keys=keys, **fields)

    async def _send(self, which: Sequence[int]) -> WriteOutcome:
        self._fault("late-send", which)
        outcome = await self.topology.inner.write_guarded(
            [self.keys[i] for i in which],
            [self.values[i] for i in which],
            version=self.version,
            token=self.token,
            expire_at_ms=self.expire_at_ms,
            limit=self.limit,
        )
        results = {text(k): code for k, code in outcome.results.items()}
        self._fault("late-sent", which, results=results, failed=sorted(map(text, outcome.failed)))
        return outcome

    async def hold(self, which: Sequence[int], *, early: WriteOutcome | None) -> WriteOutcome:
        """`delay`: hold `which` for `late_after` seconds, send it, merge with `early`."""
        self.ctx.planned = None
        self.topology.injected["delay"] += 1
        self._fault("hold", which, seconds=self.topology.late_after)
        await asyncio.sleep(self.topology.late_after)
        self.ctx.sent.update(self.keys[i] for i in which)
        outcome = await self._send(which)
        if early is not None:
            outcome.results = {**early.results, **outcome.results}
            outcome.failed = {**early.failed, **outcome.failed}
        return outcome

    async def resend(self) -> None:
        """`retry`: the whole call again, with its stamp, `late_after` seconds later."""
        self.topology.injected["retry"] += 1
        await asyncio.sleep(self.topology.late_after)
        with contextlib.suppress(Exception):
            await self._send(range(len(self.keys)))
