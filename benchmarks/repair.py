"""Repair worker throughput and scan speed, against raw redis-py doing the bare I/O.

    python -m benchmarks.repair [--groups 3000] [--scan-groups 20000]

On three local primaries started for the run:

- repairs/s of one in-process `Worker` (NewestWins) draining a queue of torn
  3-key groups, at concurrency 1, 4, 16 and 64; the raw baseline is redis-py
  reading and rewriting the same 3 keys per group (one pipeline per shard for the
  read, one for the write) at the same concurrency, with no queue and no checks.
- scan keys/s of `scan_groups` over a keyspace of 3-key groups; the raw baseline
  is redis-py walking every shard with SCAN and fetching each batch with MGET.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time
from typing import Any

from redis.asyncio import Redis

import stampede
from stampede import Envelope, HybridClock
from stampede.repair import NewestWins, RepairQueue, Worker
from stampede.scan import scan_groups
from stampede.testing import LocalPrimaries
from stampede.wire import new_token

PATTERN = r"(?P<group>g:\d+):[abc]"


def keys_of(i: int) -> list[bytes]:
    return [f"g:{i}:{p}".encode() for p in "abc"]


async def load(st: stampede.Stampede, n: int, *, torn: bool) -> None:
    """n groups in bulk (one guarded call per 500 groups); torn ones get a newer first key."""
    clock = HybridClock()
    for start in range(0, n, 500):
        chunk = range(start, min(n, start + 500))
        version, token = clock.now(), new_token()
        ks = [k for i in chunk for k in keys_of(i)]
        await st.topology.write_guarded(
            ks,
            [Envelope(version, token, b"x" * 64).encode()] * len(ks),
            version=version,
            token=token,
        )
        if torn:
            firsts = [keys_of(i)[0] for i in chunk]
            newer, t2 = version + 1, new_token()
            await st.topology.write_guarded(
                firsts,
                [Envelope(newer, t2, b"y" * 64).encode()] * len(firsts),
                version=newer,
                token=t2,
            )


async def drain(st: stampede.Stampede, n: int, concurrency: int) -> float:
    queue = RepairQueue(st.topology)
    await queue.clear()
    for i in range(n):
        await queue.enqueue(f"g:{i}", keys_of(i), {}, "torn")
    worker = Worker(st.topology, queue, NewestWins(), concurrency=concurrency, poll_interval=0.01)
    started = time.perf_counter()
    runner = asyncio.create_task(worker.run())
    for _ in iter(int, 1):  # until drained
        if worker.stats.done >= n:
            break
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    worker.stop()
    await runner
    return n / elapsed


async def raw_repairs(raw: list[Redis], st: stampede.Stampede, n: int, concurrency: int) -> float:
    shard_index = {name: i for i, name in enumerate(st.topology.shard_names)}
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            by: dict[int, list[bytes]] = {}
            for k in keys_of(i):
                by.setdefault(shard_index[st.topology.shard_of(k)], []).append(k)

            async def per_shard(s: int, ks: list[bytes], write: bool) -> Any:
                pipe = raw[s].pipeline(transaction=False)
                for k in ks:
                    if write:
                        pipe.set(k, b"z" * 64)
                    else:
                        pipe.get(k)
                return await pipe.execute()

            await asyncio.gather(*(per_shard(s, ks, False) for s, ks in by.items()))
            await asyncio.gather(*(per_shard(s, ks, True) for s, ks in by.items()))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - started)


async def raw_scan(raw: list[Redis]) -> tuple[int, float]:
    started = time.perf_counter()
    total = 0
    for client in raw:
        cursor = 0
        while True:
            cursor, keys = await client.scan(cursor, match="g:*", count=1000)
            if keys:
                await client.mget(keys)
                total += len(keys)
            if cursor == 0:
                break
    return total, time.perf_counter() - started


async def run(groups: int, scan_groups_n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"repairs": {}, "scan": {}}
    with LocalPrimaries(3) as servers:
        raw = [Redis.from_url(u) for u in servers.urls]
        async with stampede.connect(servers.urls) as st:
            for concurrency in (1, 4, 16, 64):
                servers.flushall()
                await load(st, groups, torn=True)
                ours = await drain(st, groups, concurrency)
                baseline = await raw_repairs(raw, st, groups, concurrency)
                out["repairs"][concurrency] = {"stampede": ours, "raw": baseline}
            servers.flushall()
            await load(st, scan_groups_n, torn=False)
            started = time.perf_counter()
            report = await scan_groups(st.topology, PATTERN, match="g:*")
            ours_s = time.perf_counter() - started
            total, raw_s = await raw_scan(raw)
            out["scan"] = {
                "keys": report.keys_scanned,
                "stampede_keys_per_s": report.keys_scanned / ours_s,
                "raw_keys_per_s": total / raw_s,
            }
        for client in raw:
            await client.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=3000)
    parser.add_argument("--scan-groups", type=int, default=20000)
    args = parser.parse_args()
    out = asyncio.run(run(args.groups, args.scan_groups))
    print(f"# repair worker and scan ({platform.node()}, {time.strftime('%Y-%m-%d')})")
    print(f"\n{'concurrency':>11} {'repairs/s':>10} {'raw r+w/s':>10} {'ratio':>6}")
    for c, f in out["repairs"].items():
        print(f"{c:>11} {f['stampede']:>10.0f} {f['raw']:>10.0f} {f['stampede'] / f['raw']:>6.2f}")
    s = out["scan"]
    print(
        f"\nscan: {s['keys']} keys, stampede {s['stampede_keys_per_s']:,.0f} keys/s "
        f"(scan + judge), raw SCAN+MGET {s['raw_keys_per_s']:,.0f} keys/s, "
        f"ratio {s['stampede_keys_per_s'] / s['raw_keys_per_s']:.2f}"
    )


if __name__ == "__main__":
    main()
