"""What durability costs: group writes and transactions with and without
`Durability(replicas=1)`.

    python -m benchmarks.durability [--writes 2000] [--concurrency 64] [--only shards|cluster]

On a primary with one replica (client-side sharding) and on a 3-master cluster with a
replica per master, the same 4-key group writes: plain, then with `WAIT 1` pipelined
on each write's connection (`Durability(replicas=1)`); the same 4 keys spread over
slots as a read-atomic transaction, plain and durable (each prepare and commit
waits); and, as the floor on the same
servers, raw redis-py `SET` of one key followed by `WAIT 1 1000` in one pipeline.
Prints per setting the p50 latency at concurrency 1, the throughput at
`--concurrency`, and the ratios. Nothing is asserted: the figures go into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

import stampede
from stampede import Durability, Stampede
from stampede.testing import LocalCluster, RedisNode

DURABLE = Durability(replicas=1, timeout=1.0)
KEYS = 4


async def _latency(write: Callable[[int], Awaitable[object]], n: int) -> float:
    """p50 of `n` writes one after the other, in milliseconds."""
    times = []
    for i in range(n):
        started = time.perf_counter()
        await write(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def _throughput(write: Callable[[int], Awaitable[object]], n: int, width: int) -> float:
    """Writes a second with `width` writers in flight."""
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await write(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return n / (time.perf_counter() - started)


def _group_writer(st: Stampede, durable: bool) -> Callable[[int], Awaitable[object]]:
    async def write(i: int) -> object:
        group = f"dur:{{{i % 97}}}"
        values = {f"{group}:{k}": b"v%d" % i for k in range(KEYS)}
        receipt = await st.write(group, values, durability=DURABLE if durable else None)
        if durable and not receipt.durable:
            raise RuntimeError(f"not durable: {receipt.replicas}")
        return receipt

    return write


def _txn_writer(st: Stampede, durable: bool) -> Callable[[int], Awaitable[object]]:
    async def write(i: int) -> object:
        async with st.transaction(durability=DURABLE if durable else None) as tx:
            for k in range(KEYS):
                tx.set(f"durtx:{i % 97}:{k}", b"v%d" % i)
        if durable and not (tx.receipt and tx.receipt.durable):
            raise RuntimeError(f"not durable: {tx.receipt}")
        return tx.receipt

    return write


def _raw_writer(client: Redis) -> Callable[[int], Awaitable[object]]:
    async def write(i: int) -> object:
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(f"raw:{{{i % 97}}}", b"v%d" % i)
            pipe.execute_command("WAIT", 1, 1000)
            return await pipe.execute()

    return write


async def _measure(name: str, st: Stampede, raw: Redis | None, args: argparse.Namespace) -> None:
    rows: list[tuple[str, float, float]] = []
    for label, write in (
        ("stampede write", _group_writer(st, False)),
        ("stampede write, Durability(replicas=1)", _group_writer(st, True)),
        ("stampede transaction", _txn_writer(st, False)),
        ("stampede transaction, Durability(replicas=1)", _txn_writer(st, True)),
        *((("redis-py SET + WAIT 1 (one key)", _raw_writer(raw)),) if raw is not None else ()),
    ):
        p50 = await _latency(write, max(50, args.writes // 10))
        rate = await _throughput(write, args.writes, args.concurrency)
        rows.append((label, p50, rate))
    base_p50, base_rate = rows[0][1], rows[0][2]
    print(f"\n{name}: p50 at concurrency 1, writes/s at concurrency {args.concurrency}")
    for label, p50, rate in rows:
        print(
            f"  {label:<48} p50 {p50:7.3f} ms ({p50 / base_p50:4.2f}x)   "
            f"{rate:9,.0f}/s ({rate / base_rate:4.2f}x)"
        )


async def _shards(args: argparse.Namespace) -> None:
    primary = RedisNode()
    primary.start()
    replica = RedisNode(extra_args=["--replicaof", primary.host, str(primary.port)])
    replica.start()
    try:
        replica_ready(primary)
        async with stampede.connect([primary.url]) as st:
            raw = Redis(host=primary.host, port=primary.port)
            try:
                await _measure("a primary with one replica", st, raw, args)
            finally:
                await raw.aclose()
    finally:
        replica.stop()
        primary.stop()


def replica_ready(primary: RedisNode) -> None:
    """Wait until the primary sees its replica online (WAIT counts it from then on)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if primary.client().wait(1, 100) >= 1:
            return
        time.sleep(0.05)
    raise RuntimeError("the replica never came online")


async def _cluster(args: argparse.Namespace) -> None:
    with LocalCluster(3, replicas=1) as cluster:
        async with stampede.connect(cluster.url, cluster=True) as st:
            await _measure("a 3-master cluster, one replica each", st, None, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--only", choices=["shards", "cluster"])
    args = parser.parse_args()
    if args.only != "cluster":
        asyncio.run(_shards(args))
    if args.only != "shards":
        asyncio.run(_cluster(args))


if __name__ == "__main__":
    main()
