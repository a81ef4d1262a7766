"""The source of truth for the refetch scenarios: one PostgreSQL table of group rows.

Each group is one row: the write that put it there (`wid`, `<writer>:<seq>`), a
`version` incremented in the same statement as every change, and `deleted`. A
cache-aside writer updates the row first and then writes Redis with
`version=` that row version; a `Refetch` loader reads the row back as
`Loaded(payloads naming that write, version)` (or `Loaded(None, version)` for a
deleted row), so a value read from the database names the same write as the
writer's own.

The worker subprocess builds its strategy from the environment
(`chaos.pg:worker_strategy`: `STAMPEDE_CHAOS_PG_DSN`,
`STAMPEDE_CHAOS_PG_TABLE`, plus the variables of `recording.worker_strategy`).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Sequence
from typing import Any

from stampede.repair._strategies import Loaded, Refetch

from .history import History, payload_of, text
from .recording import RecordingRepair

__all__ = ["DEFAULT_DSN", "Table", "dsn", "worker_strategy"]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def dsn() -> str:
    """`$STAMPEDE_TEST_POSTGRES_DSN`, or the local default."""
    return os.environ.get("STAMPEDE_TEST_POSTGRES_DSN", DEFAULT_DSN)


class Table:
    """One table of group rows in PostgreSQL (asyncpg pool opened lazily)."""

    def __init__(self, url: str, name: str | None = None) -> None:
        self.url = url
        self.name = name or f"stampede_chaos_{secrets.token_hex(4)}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", self.name):
            raise ValueError(f"not a plain table name: {self.name!r}")
        self._pool: Any = None

    async def pool(self) -> Any:
        if self._pool is None:
            import asyncpg

            self._pool = await asyncpg.create_pool(self.url, min_size=1, max_size=8)
        return self._pool

    async def create(self) -> None:
        pool = await self.pool()
        await pool.execute(f"DROP TABLE IF EXISTS {self.name}")
        await pool.execute(
            f"CREATE TABLE {self.name} (grp text PRIMARY KEY, wid text NOT NULL, "
            "version bigint NOT NULL, deleted boolean NOT NULL)"
        )

    async def drop(self) -> None:
        pool = await self.pool()
        await pool.execute(f"DROP TABLE IF EXISTS {self.name}")

    async def write(self, group: str, wid: str) -> int:
        """Put write `wid` in the group's row; returns the row's new version."""
        pool = await self.pool()
        version: int = await pool.fetchval(
            f"INSERT INTO {self.name} AS t (grp, wid, version, deleted) VALUES ($1, $2, 1, false) "
            "ON CONFLICT (grp) DO UPDATE SET wid = EXCLUDED.wid, version = t.version + 1, "
            "deleted = false RETURNING version",
            group,
            wid,
        )
        return version

    async def delete(self, group: str, wid: str) -> int:
        """Mark the group's row deleted (by `wid`); returns the row's new version."""
        pool = await self.pool()
        version: int = await pool.fetchval(
            f"INSERT INTO {self.name} AS t (grp, wid, version, deleted) VALUES ($1, $2, 1, true) "
            "ON CONFLICT (grp) DO UPDATE SET wid = EXCLUDED.wid, version = t.version + 1, "
            "deleted = true RETURNING version",
            group,
            wid,
        )
        return version

    async def load(self, group: bytes, keys: Sequence[bytes]) -> Loaded | None:
        """The `Refetch` loader: the row's write as payloads, with the row's version."""
        pool = await self.pool()
        row = await pool.fetchrow(
            f"SELECT wid, version, deleted FROM {self.name} WHERE grp = $1", text(group)
        )
        if row is None:
            return None
        if row["deleted"]:
            return Loaded(None, int(row["version"]))
        writer, seq = str(row["wid"]).split(":")
        return Loaded({k: payload_of(writer, int(seq), k) for k in keys}, int(row["version"]))

    def refetch(self) -> Refetch:
        return Refetch(self.load)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def worker_strategy() -> RecordingRepair:
    """The repair worker's strategy in the refetch-worker scenario: `Refetch` from the table
    named by `$STAMPEDE_CHAOS_PG_TABLE`, recorded as `recording.worker_strategy` records."""
    url = os.environ.get("STAMPEDE_CHAOS_PG_DSN") or dsn()
    table = Table(url, os.environ["STAMPEDE_CHAOS_PG_TABLE"])
    path = os.environ.get("STAMPEDE_CHAOS_HISTORY")
    history = History(path) if path else History()
    process = os.environ.get("STAMPEDE_CHAOS_PROCESS", f"worker-{os.getpid()}")
    delay = float(os.environ.get("STAMPEDE_CHAOS_REPAIR_DELAY", "0") or 0)
    return RecordingRepair(table.refetch(), history, process, reobserve=True, delay=delay)
