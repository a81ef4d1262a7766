"""Fan-out cost: 10 related keys spread over slots against the same keys under one tag.

    python -m benchmarks.fanout [--rounds 5] [--ops 2000] [--json out.json]

Starts three local redis-server primaries, writes 10 keys of 100 bytes twice:
spread (untagged names, over every primary) and co-located (one hash tag, one
primary), then measures at concurrency 1 the latency of reading all 10:

- stampede scatter-gather: `fanout.mget` over the spread keys (one MGET per
  primary, all primaries in parallel);
- stampede one tag: `fanout.mget` over the tagged keys (one MGET on one primary);
- raw redis-py, parallel: one MGET per primary with `asyncio.gather`;
- raw redis-py, sequential: one MGET per primary, one after another;
- raw redis-py, one tag: one MGET.

Each call is timed on its own; the operations alternate round by round so drift
hits all of them alike. Reported: p50 and p99 over every call, in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
from redis.asyncio import Redis

import stampede
from stampede import fanout
from stampede.testing import LocalPrimaries

Op = Callable[[], Awaitable[Any]]
KEYS = 10


def spread_keys(st: stampede.Stampede) -> list[str]:
    """`KEYS` untagged keys that between them cover every primary."""
    for start in range(0, 10_000, KEYS):
        keys = [f"bench:item:{i}" for i in range(start, start + KEYS)]
        if len(fanout.shards_for(st, keys)) == len(st.topology.shard_names):
            return keys
    raise RuntimeError("could not spread the keys over every primary")


async def sample(op: Op, ops: int) -> list[float]:
    """Seconds taken by each of `ops` sequential calls of `op`."""
    out = []
    clock = time.perf_counter
    for _ in range(ops):
        start = clock()
        await op()
        out.append(clock() - start)
    return out


async def compare(ops_by_name: dict[str, Op], *, rounds: int, ops: int) -> dict[str, Any]:
    """p50/p99/mean (us) of each op, alternating the ops round by round."""
    for op in ops_by_name.values():  # warm connections
        await sample(op, 200)
    samples: dict[str, list[float]] = {name: [] for name in ops_by_name}
    for _ in range(rounds):
        for name, op in ops_by_name.items():
            samples[name] += await sample(op, ops)
    figures = {}
    for name, values in samples.items():
        cuts = statistics.quantiles(values, n=100)
        figures[name] = {
            "p50_us": cuts[49] * 1e6,
            "p99_us": cuts[98] * 1e6,
            "mean_us": statistics.fmean(values) * 1e6,
            "calls": len(values),
        }
    return figures


async def run(rounds: int, ops: int) -> dict[str, Any]:
    with LocalPrimaries(3) as servers:
        raw = [Redis.from_url(url) for url in servers.urls]
        async with stampede.connect(servers.urls) as st:
            spread = spread_keys(st)
            tagged = [f"bench:{{item}}:{i}" for i in range(KEYS)]
            for key in [*spread, *tagged]:
                await st.topology.execute(key.encode(), "SET", key, b"x" * 100)
            names = st.topology.shard_names
            by_shard = [
                (raw[names.index(shard)], keys)
                for shard, keys in fanout.shards_for(st, spread).items()
            ]
            (tag_shard,) = fanout.shards_for(st, tagged)
            tag_client = raw[names.index(tag_shard)]

            async def raw_parallel() -> None:
                await asyncio.gather(*(client.mget(keys) for client, keys in by_shard))

            async def raw_sequential() -> None:
                for client, keys in by_shard:
                    await client.mget(keys)

            async def raw_tag() -> None:
                await tag_client.mget(tagged)

            figures = await compare(
                {
                    "stampede scatter-gather": lambda: fanout.mget(st, spread),
                    "stampede one tag": lambda: fanout.mget(st, tagged),
                    "raw parallel MGETs": raw_parallel,
                    "raw sequential MGETs": raw_sequential,
                    "raw one MGET": raw_tag,
                },
                rounds=rounds,
                ops=ops,
            )
        for client in raw:
            await client.aclose()
    return {
        "figures": figures,
        "shards_spread": len(by_shard),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


def report(results: dict[str, Any]) -> None:
    print(f"# fan-out: {KEYS} related keys, concurrency 1 ({results['date']})")
    print(f"# {results['machine']}; Python {results['python']}, redis-py {results['redis_py']}")
    print(f"# spread keys cover {results['shards_spread']} primaries; tagged keys one primary\n")
    print(f"{'':26} {'p50 us':>8} {'p99 us':>8} {'mean us':>8}")
    for name, fig in results["figures"].items():
        print(f"{name:26} {fig['p50_us']:8.1f} {fig['p99_us']:8.1f} {fig['mean_us']:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results = asyncio.run(run(args.rounds, args.ops))
    report(results)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
