"""The benchmark suite: stampede against raw redis-py on the same servers, same run.

    python -m benchmarks.suite [--seconds 1.0] [--json out.json] [--only shards|cluster]
                               [--levels 1,16,64,256]

For each topology (3 independent primaries; a 3-master cluster), each operation
and each concurrency (1, 16, 64, 256 requests in flight), it runs stampede and
raw redis-py doing the same work in its most natural way (one pipeline per shard
per request, all shards in parallel; on the cluster, redis-py's cluster pipeline),
in ten alternating slices each, and reports median and p99 latency, throughput
and the ratios.

Operations: read (stamp), read (commit), write (stamp, HybridClock), write
(commit), write (stamp, Counter) of a 4-key group spread over the shards, drawn
from 256 groups, each against raw GETs or SETs; and the stamped write once more
against raw redis-py calling stampede's guard script itself (EVALSHA per key on
the cluster, per shard over primaries), which separates the server's cost of the
guard from stampede's own. A reference line gives raw 256-command GET pipelines
on one primary: the most one process gets out of redis-py.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

import stampede
from stampede.testing import LocalCluster, LocalPrimaries
from stampede.topology._guard import GUARD_SCRIPT, GUARD_SHA, KEEP_MS
from stampede.wire import new_token

Op = Callable[[int], Awaitable[Any]]
LEVELS = (1, 16, 64, 256)
ROUNDS = 10
GROUPS = 256


def group_keys(g: int, prefix: str = "bench") -> list[str]:
    return [f"{prefix}:{g}:{part}" for part in ("a", "b", "c", "d")]


async def run_for(
    op: Op, concurrency: int, seconds: float, latencies: list[float], rng: random.Random
) -> float:
    """Run `op` from `concurrency` tasks for `seconds`, adding to `latencies`; elapsed s."""
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < stop:
            started = time.perf_counter()
            await op(rng.randrange(GROUPS))
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    return time.perf_counter() - started


def summary(latencies: list[float], elapsed: float) -> dict[str, float]:
    """Throughput, median and p99 (microseconds) of one side's pooled latencies."""
    latencies.sort()
    return {
        "ops_per_s": len(latencies) / elapsed,
        "p50_us": statistics.median(latencies) * 1e6,
        "p99_us": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1e6,
    }


async def measure_pair(
    mine: Op, theirs: Op, concurrency: int, seconds: float, rounds: int = ROUNDS
) -> tuple[dict[str, float], dict[str, float]]:
    """Both sides for `seconds` each, in `rounds` alternating slices, pooled.

    On a shared (virtual) machine the speed drifts from second to second; slicing
    both sides finely and alternating which goes first puts the drift on both.
    """
    lat: tuple[list[float], list[float]] = ([], [])
    elapsed = [0.0, 0.0]
    rng = random.Random(concurrency)
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            op = mine if side == 0 else theirs
            elapsed[side] += await run_for(op, concurrency, seconds / rounds, lat[side], rng)
    return summary(lat[0], elapsed[0]), summary(lat[1], elapsed[1])


PAYLOAD = b"x" * 100
STAMPS = ((v, new_token()) for v in itertools.count(1))
"""Stamps for the raw guarded writes (the payload is not an envelope; the guard
only reads the stored one, and these keys hold only its own writes)."""


def guard_args(version: int, token: str, keys: int = 1) -> tuple[Any, ...]:
    """A lone write's ARGV for the guard, as stampede sends them: its stamp (version,
    token, expire-at (none), limit (no check), how long the replaced value is kept),
    then the value of each of its `keys` keys."""
    return (version, token, 0, 0, KEEP_MS, *[PAYLOAD] * keys)


def raw_cluster_ops(cluster: RedisCluster) -> dict[str, Op]:
    """redis-py's natural way on a cluster: one cluster pipeline per request."""

    async def read(g: int) -> Any:
        pipe = cluster.pipeline()
        for k in group_keys(g):
            pipe.get(k)
        return await pipe.execute()

    async def write(g: int) -> Any:
        pipe = cluster.pipeline()
        for k in group_keys(g):
            pipe.set(k + ":raw", PAYLOAD)
        return await pipe.execute()

    async def guarded(g: int) -> Any:
        version, token = next(STAMPS)
        pipe = cluster.pipeline()
        for k in group_keys(g):
            pipe.execute_command("EVALSHA", GUARD_SHA, 1, k + ":raw", *guard_args(version, token))
        return await pipe.execute()

    return {"read": read, "write": write, "guarded": guarded}


def raw_shard_ops(shards: list[Redis], shard_of: Callable[[str], int]) -> dict[str, Op]:
    """redis-py's natural way over primaries: one pipeline per shard, in parallel."""

    async def per_shard(g: int, write: bool) -> Any:
        by: dict[int, list[str]] = {}
        for k in group_keys(g):
            by.setdefault(shard_of(k), []).append(k)

        async def one(s: int, ks: list[str]) -> Any:
            pipe = shards[s].pipeline(transaction=False)
            for k in ks:
                if write:
                    pipe.set(k + ":raw", PAYLOAD)
                else:
                    pipe.get(k)
            return await pipe.execute()

        return await asyncio.gather(*(one(s, ks) for s, ks in by.items()))

    async def read(g: int) -> Any:
        return await per_shard(g, False)

    async def write(g: int) -> Any:
        return await per_shard(g, True)

    async def guarded(g: int) -> Any:
        version, token = next(STAMPS)
        by: dict[int, list[str]] = {}
        for k in group_keys(g):
            by.setdefault(shard_of(k), []).append(k + ":raw")

        async def one(s: int, ks: list[str]) -> Any:
            args = guard_args(version, token, len(ks))
            return await shards[s].evalsha(GUARD_SHA, len(ks), *ks, *args)

        return await asyncio.gather(*(one(s, ks) for s, ks in by.items()))

    return {"read": read, "write": write, "guarded": guarded}


def ours(st: stampede.Stampede) -> dict[str, tuple[str, Op]]:
    def read(mode: Literal["stamp", "commit"]) -> Op:
        return lambda g: st.read(f"bench:{g}", group_keys(g), mode=mode)

    def write(mode: Literal["stamp", "commit"], versions: Literal["hybrid", "counter"]) -> Op:
        # Counter versions cannot follow HybridClock ones on a group (the guard refuses
        # to order the two kinds): the counter's writes have groups of their own.
        prefix = "bench" if versions == "hybrid" else "counted"
        return lambda g: st.write(
            f"{prefix}:{g}",
            dict.fromkeys(group_keys(g, prefix), PAYLOAD),
            mode=mode,
            versions=versions,
        )

    return {
        "read stamp": ("read", read("stamp")),
        "read commit": ("read", read("commit")),
        "write stamp hybrid": ("write", write("stamp", "hybrid")),
        "write commit hybrid": ("write", write("commit", "hybrid")),
        "write stamp counter": ("write", write("stamp", "counter")),
        # the same stamped write against raw redis-py calling the guard script itself
        "write stamp vs guard": ("guarded", write("stamp", "hybrid")),
    }


async def pipeline_ceiling(url: str, seconds: float, key: str = "ceiling") -> float:
    """GETs/s of raw 256-command pipelines on one primary, one task."""
    client = Redis.from_url(url)
    await client.set(key, b"x" * 100)
    count = 0
    stop = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < stop:
        pipe = client.pipeline(transaction=False)
        for _ in range(256):
            pipe.get(key)
        await pipe.execute()
        count += 256
    rate = count / (time.perf_counter() - started)
    await client.aclose()
    return rate


async def run_topology(kind: str, seconds: float, levels: tuple[int, ...]) -> dict[str, Any]:
    servers: Any = LocalCluster(3) if kind == "cluster" else LocalPrimaries(3)
    with servers:
        if kind == "cluster":
            st = stampede.connect(servers.url, cluster=True)
            raw_clients: Any = RedisCluster.from_url(servers.url, max_connections=1024)
        else:
            st = stampede.connect(servers.urls)
            raw_clients = [Redis.from_url(u, max_connections=1024) for u in servers.urls]
        results: dict[str, Any] = {}
        for client in [raw_clients] if kind == "cluster" else raw_clients:
            await client.script_load(GUARD_SCRIPT)
        async with st:
            names = st.topology.shard_names
            raw = (
                raw_cluster_ops(raw_clients)
                if kind == "cluster"
                else raw_shard_ops(
                    raw_clients, lambda k: names.index(st.topology.shard_of(k.encode()))
                )
            )
            for g in range(GROUPS):
                await st.write(
                    f"bench:{g}", dict.fromkeys(group_keys(g), b"x" * 100), mode="commit"
                )
            for name, (base, op) in ours(st).items():
                results[name] = {}
                for level in levels:
                    mine, theirs = await measure_pair(op, raw[base], level, seconds)
                    results[name][level] = {
                        "stampede": mine,
                        "raw": theirs,
                        "latency_ratio": mine["p50_us"] / theirs["p50_us"],
                        "throughput_ratio": mine["ops_per_s"] / theirs["ops_per_s"],
                    }
                    print(
                        f"  {kind:8} {name:22} c={level:<4} "
                        f"{mine['ops_per_s']:8.0f}/s vs raw {theirs['ops_per_s']:8.0f}/s"
                    )
            first = servers.urls[0]
            key = next(  # a key the first node serves itself (no MOVED on a cluster)
                k
                for k in (f"ceiling:{i}" for i in range(10_000))
                if st.topology.shard_of(k.encode()) == first.removeprefix("redis://")
            )
            ceiling = await pipeline_ceiling(first, seconds, key)
        if kind == "cluster":
            await raw_clients.aclose()
        else:
            for client in raw_clients:
                await client.aclose()
    return {"ops": results, "raw_pipeline_256_gets_per_s": ceiling}


def report(data: dict[str, Any]) -> None:
    print(f"\n# stampede benchmark suite ({data['machine']}, {data['date']})")
    for kind, res in data["topologies"].items():
        print(
            f"\n## {kind}: 4-key groups; raw 256-GET pipelines: "
            f"{res['raw_pipeline_256_gets_per_s']:,.0f} GET/s"
        )
        print(
            f"{'operation':22} {'c':>4} {'ops/s':>8} {'raw/s':>8} {'x':>5} "
            f"{'p50us':>7} {'raw p50':>7} {'p99us':>7} {'raw p99':>7} {'lat x':>6}"
        )
        for name, levels in res["ops"].items():
            for level, r in levels.items():
                m, t = r["stampede"], r["raw"]
                print(
                    f"{name:22} {level:>4} {m['ops_per_s']:8.0f} {t['ops_per_s']:8.0f} "
                    f"{r['throughput_ratio']:5.2f} {m['p50_us']:7.0f} {t['p50_us']:7.0f} "
                    f"{m['p99_us']:7.0f} {t['p99_us']:7.0f} {r['latency_ratio']:6.2f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--only", choices=["shards", "cluster"])
    parser.add_argument("--json", dest="json_path")
    parser.add_argument(
        "--levels",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=LEVELS,
        help="concurrency levels, comma-separated (default 1,16,64,256)",
    )
    args = parser.parse_args()
    data: dict[str, Any] = {
        "machine": f"{platform.node()} ({platform.machine()}, {platform.python_version()})",
        "date": time.strftime("%Y-%m-%d"),
        "topologies": {},
    }
    for kind in ("shards", "cluster"):
        if args.only in (None, kind):
            data["topologies"][kind] = asyncio.run(run_topology(kind, args.seconds, args.levels))
    report(data)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(data, fh, indent=2)


if __name__ == "__main__":
    main()
