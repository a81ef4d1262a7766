"""A hot entity sharded within itself: one celebrity's followers in N buckets.

One tag for all of a celebrity's followers would put its whole load on one shard.
Instead the follower set is split into buckets `social:followers:{celeb-1.<b>}`,
each with its own tag, so the buckets spread over the slots and shards. Inside a
bucket the set and its counter share a tag, and a Lua script adds a follower and
bumps the counter only if the follower is new. The total is a scatter-gather of
the N counters (one request per shard, in parallel); membership asks one bucket.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic, fanout

BUCKETS = 8
FOLLOW = atomic.script(
    """
    -- KEYS: bucket set, bucket counter. ARGV: follower. 1 if new, 0 if already there.
    if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
      redis.call('INCR', KEYS[2])
      return 1
    end
    return 0
    """,
    name="follow",
)


def bucket_keys(celeb: str, follower: str) -> list[str]:
    """The set and counter of the bucket `follower` belongs to (a stable hash)."""
    b = zlib.crc32(follower.encode()) % BUCKETS
    return [f"social:followers:{{{celeb}.{b}}}:set", f"social:followers:{{{celeb}.{b}}}:count"]


def counters(celeb: str) -> list[str]:
    """The counter key of every bucket."""
    return [f"social:followers:{{{celeb}.{b}}}:count" for b in range(BUCKETS)]


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Follow 400 fans (500 follows), count them by scatter-gather, check membership."""
    async with stampede.connect(urls, cluster=cluster) as st:
        celeb = "celeb-1"
        followers = [f"fan-{i % 400}" for i in range(500)]  # 100 repeat follows
        gate = asyncio.Semaphore(32)  # stay well inside the connection pools

        async def follow(fan: str) -> int:
            async with gate:
                added: int = await FOLLOW(st, keys=bucket_keys(celeb, fan), args=[fan])
                return added

        added = await asyncio.gather(*(follow(f) for f in followers))
        assert sum(added) == 400

        plan = fanout.shards_for(st, counters(celeb))
        counts = await fanout.mget(st, counters(celeb))
        total = sum(int(c or 0) for c in counts)
        print(
            f"{total} followers in {BUCKETS} buckets over {len(plan)} shards: "
            + ", ".join(f"{shard} x{len(keys)}" for shard, keys in plan.items())
        )
        assert total == 400 and len(plan) > 1

        one = bucket_keys(celeb, "fan-7")[0]
        assert await st.topology.execute(one.encode(), "SISMEMBER", one, "fan-7") == 1
        assert await FOLLOW(st, keys=bucket_keys(celeb, "fan-7"), args=["fan-7"]) == 0
        print("membership is one request to one bucket; a repeat follow counts once")


if __name__ == "__main__":
    _run.run(main, __doc__)
