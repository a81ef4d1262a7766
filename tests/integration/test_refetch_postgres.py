"""`Refetch` against a real PostgreSQL table as the source of truth."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from stampede import Envelope, RetryPolicy, Stampede, Status
from stampede.repair import Loaded, Refetch

from ..support import write_newer

pytestmark = pytest.mark.postgres

DSN = os.environ.get("STAMPEDE_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
USERS = 30


def keys(uid: int) -> list[str]:
    return [f"user:{uid}:profile", f"user:{uid}:settings"]


@pytest.fixture
async def table() -> AsyncIterator[tuple[asyncpg.Pool, str]]:
    """A users table of its own, created for the test and dropped after it."""
    try:
        pool = await asyncpg.create_pool(DSN, min_size=1, max_size=4)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"PostgreSQL at {DSN} is not reachable ({exc}); start it or set "
            "STAMPEDE_TEST_POSTGRES_DSN, or deselect with -m 'not postgres'"
        )
    name = f"stampede_users_{secrets.token_hex(4)}"
    await pool.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, profile text, settings text)")
    try:
        await pool.executemany(
            f"INSERT INTO {name} VALUES ($1, $2, $3)",
            [(u, f'{{"name": "user {u}"}}', f'{{"theme": "t{u % 3}"}}') for u in range(USERS)],
        )
        yield pool, name
    finally:
        await pool.execute(f"DROP TABLE IF EXISTS {name}")
        await pool.close()


def loader_for(pool: asyncpg.Pool, name: str) -> Refetch:
    async def load(group: bytes, ks: Sequence[bytes]) -> dict[bytes, bytes] | None:
        uid = int(group.split(b":")[1])
        row = await pool.fetchrow(f"SELECT profile, settings FROM {name} WHERE id = $1", uid)
        if row is None:
            return None
        profile, settings = (k.encode() for k in keys(uid))
        return {profile: row["profile"].encode(), settings: row["settings"].encode()}

    return Refetch(load, fills_missing=True)


async def test_torn_and_missing_copies_come_back_from_the_table(
    st: Stampede, table: tuple[asyncpg.Pool, str]
) -> None:
    """Torn, partly missing and wholly missing Redis copies are rewritten from PostgreSQL."""
    pool, name = table
    repair = loader_for(pool, name)
    for uid in range(USERS):
        await st.write(f"user:{uid}", dict.fromkeys(keys(uid), b"stale cache"))
    for uid in range(0, USERS, 3):  # torn: a newer write reached the profile only
        await write_newer(st, [keys(uid)[0].encode()], b"half")
    for uid in range(1, USERS, 3):  # partial: the settings copy is gone
        await st.topology.execute(keys(uid)[1].encode(), "DEL", keys(uid)[1])
    for uid in range(2, USERS, 6):  # missing altogether: read-through fills it
        for key in keys(uid):
            await st.topology.execute(key.encode(), "DEL", key)
    await pool.execute(f'UPDATE {name} SET profile = \'{{"name": "renamed"}}\' WHERE id = 0')

    for uid in range(USERS):
        result = await st.read(f"user:{uid}", keys(uid), retry=QUICK, repair=repair)
        row = await pool.fetchrow(f"SELECT profile, settings FROM {name} WHERE id = $1", uid)
        touched = uid % 3 in (0, 1) or uid % 6 == 2
        if touched:
            assert result.repaired, uid
            assert result.values == {
                keys(uid)[0]: row["profile"].encode(),
                keys(uid)[1]: row["settings"].encode(),
            }
        else:
            assert result.values == dict.fromkeys(keys(uid), b"stale cache")
        again = await st.read(f"user:{uid}", keys(uid))
        assert again.consistent and again.values == result.values
    assert (await st.read("user:0", keys(0))).values[keys(0)[0]] == b'{"name": "renamed"}'


async def test_row_deleted_at_the_source_removes_the_copies(
    st: Stampede, table: tuple[asyncpg.Pool, str]
) -> None:
    """A torn group whose row is gone from PostgreSQL is deleted from Redis: guarded
    tombstones that expire after the grace period."""
    pool, name = table
    await st.write("user:5", dict.fromkeys(keys(5), b"cached"), mode="commit")
    await st.topology.execute(keys(5)[1].encode(), "DEL", keys(5)[1])
    await pool.execute(f"DELETE FROM {name} WHERE id = 5")
    result = await st.read(
        "user:5", keys(5), mode="commit", retry=QUICK, repair=loader_for(pool, name)
    )
    assert result.status is Status.NOT_FOUND and result.repaired
    for key in keys(5):
        stored = Envelope.decode(await st.topology.execute(key.encode(), "GET", key))
        assert stored.tombstone
        ttl = await st.topology.execute(key.encode(), "PTTL", key)
        assert 0 < ttl <= st.options.tombstone_grace * 1000


@pytest.fixture
async def versioned() -> AsyncIterator[tuple[asyncpg.Pool, str]]:
    """A users table with a row version column, as docs/repair.md shows."""
    pool = await asyncpg.create_pool(DSN, min_size=1, max_size=4)
    name = f"stampede_vusers_{secrets.token_hex(4)}"
    await pool.execute(
        f"CREATE TABLE {name} (id int PRIMARY KEY, profile bytea, settings bytea, "
        "version bigint NOT NULL DEFAULT 1)"
    )
    try:
        await pool.execute(f"INSERT INTO {name} VALUES (1, 'p0', 's0')")
        yield pool, name
    finally:
        await pool.execute(f"DROP TABLE IF EXISTS {name}")
        await pool.close()


async def test_row_versions_order_the_cache(
    st: Stampede, versioned: tuple[asyncpg.Pool, str]
) -> None:
    """Cache-aside with the row version: a writer that stalled with an older row reaches
    Redis last and is kept out; a repair is written under the row's version; a loader
    reading an older row than Redis holds is refused."""
    pool, name = versioned
    ks = keys(1)

    async def save(profile: bytes) -> tuple[int, dict[str, bytes]]:
        row = await pool.fetchrow(
            f"UPDATE {name} SET profile = $2, settings = $2, version = version + 1 "
            "WHERE id = $1 RETURNING version",
            1,
            profile,
        )
        return row["version"], dict.fromkeys(ks, profile)

    async def load(group: bytes, names: Sequence[bytes]) -> Loaded:
        row = await pool.fetchrow(f"SELECT profile, settings, version FROM {name} WHERE id = 1")
        return Loaded(
            dict(zip(names, [row["profile"], row["settings"]], strict=True)), row["version"]
        )

    slow_version, slow_values = await save(b"first")  # this writer stalls before Redis
    fast_version, fast_values = await save(b"second")
    await st.write("user:1", fast_values, version=fast_version)
    late = await st.write("user:1", slow_values, version=slow_version)
    assert late.superseded == tuple(k.encode() for k in ks)
    assert (await st.read("user:1", ks)).values == fast_values

    newest_version, _ = await save(b"third")  # the database moved on; Redis tore
    await write_newer(st, [ks[0].encode()], b"torn")
    result = await st.read("user:1", ks, retry=QUICK, repair=Refetch(load))
    assert result.repaired and result.version == newest_version
    assert result.values == dict.fromkeys(ks, b"third")


async def test_row_deleted_under_row_versions_removes_the_copies(
    st: Stampede, versioned: tuple[asyncpg.Pool, str]
) -> None:
    """The loader docs/repair.md shows returns `Loaded(None, 1)` for a row that is gone:
    a deleted row has no version, so the delete is ordered after what Redis holds (not
    refused as older), and the stalled writer's older row stays out."""
    pool, name = versioned
    ks = keys(1)

    async def load(group: bytes, names: Sequence[bytes]) -> Loaded:
        row = await pool.fetchrow(f"SELECT profile, settings, version FROM {name} WHERE id = 1")
        if row is None:
            return Loaded(None, 1)  # gone: tombstones
        return Loaded(
            dict(zip(names, [row["profile"], row["settings"]], strict=True)), row["version"]
        )

    saved = []
    for profile in (b"first", b"second"):
        row = await pool.fetchrow(
            f"UPDATE {name} SET profile = $2, settings = $2, version = version + 1 "
            "WHERE id = $1 RETURNING version",
            1,
            profile,
        )
        saved.append((row["version"], dict.fromkeys(ks, profile)))
    await st.write("user:1", saved[1][1], version=saved[1][0])
    await write_newer(st, [ks[0].encode()], b"torn")  # Redis tore past the row's version
    await pool.execute(f"DELETE FROM {name} WHERE id = 1")

    result = await st.read("user:1", ks, retry=QUICK, repair=Refetch(load))
    assert result.status is Status.NOT_FOUND and result.repaired
    late = await st.write("user:1", saved[0][1], version=saved[0][0])
    assert late.superseded == tuple(k.encode() for k in ks)
    assert (await st.read("user:1", ks)).status is Status.NOT_FOUND
