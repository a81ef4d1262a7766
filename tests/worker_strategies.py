"""Strategy factories the worker tests load by name (`tests.worker_strategies:...`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from stampede.repair import NewestWins, Refetch, RepairContext, RepairOutcome
from stampede.verdict import Observation, Verdict


class SlowNewestWins(NewestWins):
    """NewestWins that takes its time, so a worker can be killed mid-batch."""

    name = "slow-newest-wins"

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        await asyncio.sleep(0.05)
        return await super().repair(ctx, obs, verdict)


def slow() -> SlowNewestWins:
    return SlowNewestWins()


async def _broken_loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
    raise ConnectionError("the database is unreachable")


def broken() -> Refetch:
    """Refetch whose loader always fails: its jobs must end as dead letters."""
    return Refetch(_broken_loader)


not_a_strategy = 42


def raising_factory() -> NewestWins:
    raise RuntimeError("factory exploded")
