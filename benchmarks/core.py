"""Stamped reads and writes against raw redis-py, on the same servers in the same run.

    python -m benchmarks.core [--rounds 7] [--ops 2000] [--json out.json]

Starts three local redis-server primaries, then measures, at concurrency 1:

- read:  a 4-key group spread over the 3 primaries. Raw: one redis-py pipeline of
  GETs per shard, all shards in parallel. stampede: `Stampede.read` (stamp mode).
- write: the same 4 keys. Raw: one pipeline of SETs per shard in parallel.
  stampede: `Stampede.write` in stamp mode with HybridClock, then the extra cost
  of commit mode and of the Counter version source.

Each figure is the median over rounds of the mean latency within a round; the
operations take turns within each round, in an order rotated from round to round,
so drift hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

import stampede
from stampede.testing import LocalPrimaries

Op = Callable[[], Awaitable[Any]]


def spread(st: stampede.Stampede, prefix: str, count: int) -> list[str]:
    """`count` keys of a group covering every shard."""
    keys: list[str] = []
    seen: set[str] = set()
    shards = len(st.topology.shard_names)
    for i in range(1000):
        key = f"{prefix}:{i}"
        shard = st.topology.shard_of(key.encode())
        if shard not in seen or len(seen) == shards:
            keys.append(key)
            seen.add(shard)
        if len(keys) == count:
            return keys
    raise RuntimeError("could not spread keys")


async def per_op(op: Op, ops: int) -> float:
    """Mean seconds per call of `op` over `ops` sequential calls."""
    start = time.perf_counter()
    for _ in range(ops):
        await op()
    return (time.perf_counter() - start) / ops


async def compare(ops_by_name: dict[str, Op], *, rounds: int, ops: int) -> dict[str, float]:
    for op in ops_by_name.values():  # warm connections and scripts
        await per_op(op, 50)
    samples: dict[str, list[float]] = {name: [] for name in ops_by_name}
    names = list(ops_by_name)
    for r in range(rounds):
        # rotate the order each round, so that no operation always follows the same one
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(await per_op(ops_by_name[name], ops))
    return {name: statistics.median(values) for name, values in samples.items()}


async def run(rounds: int, ops: int) -> dict[str, Any]:
    with LocalPrimaries(3) as servers:
        raw = [Redis.from_url(url) for url in servers.urls]
        plain = stampede.connect(servers.urls, connection=stampede.ConnectOptions(coalesce=False))
        async with stampede.connect(servers.urls) as st, plain:
            keys = spread(st, "bench", 4)
            by_shard: dict[int, list[str]] = {}
            for key in keys:
                by_shard.setdefault(
                    st.topology.shard_names.index(st.topology.shard_of(key.encode())), []
                ).append(key)
            payload = b"x" * 100
            await st.write("bench", dict.fromkeys(keys, payload))

            async def raw_read() -> None:
                async def one(i: int, ks: list[str]) -> Any:
                    pipe = raw[i].pipeline(transaction=False)
                    for k in ks:
                        pipe.get(k)
                    return await pipe.execute()

                await asyncio.gather(*(one(i, ks) for i, ks in by_shard.items()))

            async def raw_write() -> None:
                async def one(i: int, ks: list[str]) -> Any:
                    pipe = raw[i].pipeline(transaction=False)
                    for k in ks:
                        pipe.set(f"raw:{k}", payload)
                    return await pipe.execute()

                await asyncio.gather(*(one(i, ks) for i, ks in by_shard.items()))

            values = dict.fromkeys(keys, payload)
            # Counter versions cannot follow HybridClock versions on one group (the
            # guard refuses to order them): the counter writes have their own group.
            counted_keys = spread(st, "bench-counter", 4)
            counted = dict.fromkeys(counted_keys, payload)
            reads = await compare(
                {
                    "raw pipelines": raw_read,
                    "stampede read": lambda: st.read("bench", keys),
                    "stampede read (no coalescing)": lambda: plain.read("bench", keys),
                },
                rounds=rounds,
                ops=ops,
            )
            await st.write("bench", values, mode="commit")
            reads["stampede read (commit)"] = (
                await compare(
                    {"c": lambda: st.read("bench", keys, mode="commit")}, rounds=rounds, ops=ops
                )
            )["c"]
            writes = await compare(
                {
                    "raw pipelines": raw_write,
                    "stampede write (hybrid)": lambda: st.write("bench", values),
                    "stampede write (no coalescing)": lambda: plain.write("bench", values),
                    "stampede write (commit)": lambda: st.write("bench", values, mode="commit"),
                    "stampede write (counter)": lambda: st.write(
                        "bench-counter", counted, versions="counter"
                    ),
                },
                rounds=rounds,
                ops=ops,
            )
        for client in raw:
            await client.aclose()
    return {"read": reads, "write": writes}


def report(results: dict[str, Any]) -> None:
    when = time.strftime("%Y-%m-%d")
    print(f"# stampede vs raw redis-py, concurrency 1 ({platform.node()}, {when})")
    for kind, figures in results.items():
        base = figures["raw pipelines"]
        print(f"\n{kind}: 4-key group over 3 primaries")
        print(f"{'':32} {'us/op':>9} {'ops/s':>9} {'ratio':>6}")
        for name, seconds in figures.items():
            print(f"{name:32} {seconds * 1e6:9.1f} {1 / seconds:9.0f} {seconds / base:6.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
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
