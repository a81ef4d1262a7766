"""Session cleanup in Lua: a user's session index and session data never disagree.

Each user keeps a sorted set `index` (session id -> expiry in ms) and a hash
`data` (session id -> JSON) under the user's tag. One script removes every
expired id from both at once, so a login racing the cleanup can never leave an
id in the index without data (or the reverse). Users live in different slots,
so cleaning many users is one script call per user, all in parallel.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic

CLEANUP = atomic.script(
    """
    -- KEYS: index, data. ARGV: now (ms). Returns how many sessions were removed.
    local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
    for i = 1, #ids, 1000 do
      redis.call('HDEL', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
    return #ids
    """,
    name="session-cleanup",
)


def keys_of(user: int) -> list[str]:
    """The session index and data keys of `user` (one tag per user)."""
    return [f"auth:sessions:{{u{user}}}:index", f"auth:sessions:{{u{user}}}:data"]


async def login(st: stampede.Stampede, user: int, sid: str, expires_ms: int) -> None:
    """Add a session to the user's index and data in one MULTI/EXEC."""
    index, data = keys_of(user)
    body = json.dumps({"user": user, "sid": sid})
    await atomic.multi(st, [("ZADD", index, expires_ms, sid), ("HSET", data, sid, body)])


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Expire sessions of six users while they log in again; check index == data."""
    async with stampede.connect(urls, cluster=cluster) as st:
        now = int(time.time() * 1000)
        users = range(6)
        for user in users:  # 4 expired and 2 live sessions each
            for n in range(6):
                await login(st, user, f"s{n}", now - 1000 if n < 4 else now + 60_000)
        shards = {st.topology.shard_of(keys_of(u)[0].encode()) for u in users}

        removed, _ = await asyncio.gather(
            asyncio.gather(*(CLEANUP(st, keys=keys_of(u), args=[now]) for u in users)),
            asyncio.gather(*(login(st, u, "fresh", now + 60_000) for u in users)),
        )
        assert removed == [4] * len(users), removed
        print(
            f"cleaned {sum(removed)} expired sessions of {len(users)} users on "
            f"{len(shards)} shards, while they logged in again"
        )

        for user in users:
            ids, data = await atomic.multi(
                st, [("ZRANGE", keys_of(user)[0], 0, -1), ("HKEYS", keys_of(user)[1])]
            )
            assert sorted(ids) == sorted(data) == [b"fresh", b"s4", b"s5"], (ids, data)
        assert await CLEANUP(st, keys=keys_of(0), args=[now]) == 0
        print("every index matches its data: 3 live sessions per user")


if __name__ == "__main__":
    _run.run(main, __doc__)
