"""Strategy factories the worker tests load by name (`tests.worker_strategies:...`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from stampede.repair import NewestWins, Refetch, RepairContext
from stampede.results import RepairOutcome
from stampede.verdict import Observation, Verdict


class SlowNewestWins(NewestWins):
    """NewestWins that takes its time, so a worker can be killed mid-batch."""

    name = "slow-newest-wins"

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        await asyncio.sleep(0.05)
        return await super().repair(ctx, obs, verdict)


def slow() -> SlowNewestWins:
    return SlowNewestWins()


class StallsAfter(NewestWins):
    """NewestWins that repairs `done` jobs, then holds every later one for ever: a
    worker killed then certainly dies with jobs in its hands."""

    name = "stalls-after"

    def __init__(self, done: int) -> None:
        super().__init__()
        self.left = done

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        if self.left <= 0:
            await asyncio.Event().wait()
        self.left -= 1
        return await super().repair(ctx, obs, verdict)


def stalls_after_16() -> StallsAfter:
    return StallsAfter(16)


async def _broken_loader(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes]:
    raise ConnectionError("the database is unreachable")


async def _gone_loader(group: bytes, keys: Sequence[bytes]) -> None:
    return None


def gone() -> Refetch:
    """Refetch whose source has no entity at all: every repair deletes the group."""
    return Refetch(_gone_loader)


def broken() -> Refetch:
    """Refetch whose loader always fails: its jobs must end as dead letters."""
    return Refetch(_broken_loader)


not_a_strategy = 42


def raising_factory() -> NewestWins:
    raise RuntimeError("factory exploded")


def returns_class() -> type[NewestWins]:
    """A factory that forgot to call the class."""
    return NewestWins


class Stuck(NewestWins):
    """A repair that never finishes on its own: only a stop's grace period ends it."""

    name = "stuck"

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def stuck() -> Stuck:
    return Stuck()


class FailsToStart(NewestWins):
    name = "fails-to-start"

    async def on_startup(self) -> None:
        raise ConnectionError("the database refused the pool")


class FailsToStop(NewestWins):
    """A strategy whose shutdown hook raises (a pool closed twice, say)."""

    name = "fails-to-stop"

    async def on_shutdown(self) -> None:
        raise RuntimeError("pool already closed")


def fails_to_stop() -> FailsToStop:
    return FailsToStop()


def fails_to_start() -> FailsToStart:
    return FailsToStart()


# --- PostgreSQL: the factory opens an asyncpg pool (docs/operations.md's pattern) ---

PG_DSN = os.environ.get(
    "STAMPEDE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _pg_loader(pool: Any, table: str) -> Callable[[bytes, Sequence[bytes]], Any]:
    async def load(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes] | None:
        uid = int(group.split(b":")[1])
        row = await pool.fetchrow(f"SELECT a, b, c FROM {table} WHERE id = $1", uid)
        if row is None:
            return None
        return {k: row[k.rsplit(b":", 1)[1].decode()].encode() for k in keys}

    return load


class PoolRefetch(Refetch):
    """Refetch from a table through an asyncpg pool it closes on shutdown.

    `on_shutdown` writes "closed" to `$STAMPEDE_TEST_PG_CLOSED` once the pool is
    closed, so a test can see that SIGTERM ran it."""

    name = "pool-refetch"

    def __init__(self, pool: Any, table: str) -> None:
        super().__init__(_pg_loader(pool, table))
        self.pool = pool

    async def on_startup(self) -> None:
        await self.pool.execute("SELECT 1")

    async def on_shutdown(self) -> None:
        await self.pool.close()
        marker = os.environ.get("STAMPEDE_TEST_PG_CLOSED")
        if marker:
            await asyncio.to_thread(Path(marker).write_text, "closed")


async def pg_pool_factory() -> PoolRefetch:
    """The async factory of the docs: opens a pool, returns the strategy."""
    import asyncpg

    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=4)
    return PoolRefetch(pool, os.environ["STAMPEDE_TEST_PG_TABLE"])


@contextlib.asynccontextmanager
async def pg_pool_context() -> AsyncIterator[Refetch]:
    """A factory written as an async context manager: the pool lives as long as it."""
    import asyncpg

    pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=2)
    try:
        yield Refetch(_pg_loader(pool, os.environ["STAMPEDE_TEST_PG_TABLE"]))
    finally:
        await pool.close()
