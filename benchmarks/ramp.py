"""Read-atomic transactions: rounds, latency, memory per key, and storage over time.

    python -m benchmarks.ramp [--seconds 3] [--only shards|cluster] [--json out.json]

For each topology (3 independent primaries; a 3-master cluster), on the same
servers in the same run:

1. *Mixed workload*: 16 tasks, each request a read transaction (95%,
   `read_atomic` of 4 random keys) or a write transaction (5%, 4 random keys),
   over 1000 keys, then over a hot set of 100. Reports the fraction of reads
   done in one round, the most rounds any read took, and p50/p99 latency of
   reads and writes.
2. *Read latency at concurrency 1* (alternating slices): `read_atomic` of 4
   keys, a stamp-mode group read (`Stampede.read`) of a 4-key group, and raw
   redis-py GETs (one pipeline per shard in parallel; a cluster pipeline on
   the cluster) of the same 4 keys.
3. *Memory per key*: MEMORY USAGE of a transaction's data key and of its version
   hash (fields counted), right after the workloads and again after the grace
   window and one `sweep`, against a stamped `write` and a raw SET of the same
   100-byte payload.
4. *Storage under sustained writes*: 4 writer tasks rewrite 100 keys for
   `--seconds` with a 0.5 s grace window; the version hashes' fields are sampled
   during the load and again after the grace window and one `sweep`.

Nothing is asserted; the figures go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

import stampede
from stampede.repair import sweep_versions as sweep
from stampede.testing import LocalCluster, LocalPrimaries
from stampede.wire import version_hash_key as side_key

PAYLOAD = b"x" * 100
GRACE = 0.5


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e6 if ordered else 0.0


async def seed(st: stampede.Stampede, keys: list[str]) -> None:
    for i in range(0, len(keys), 8):
        async with st.transaction() as tx:
            for key in keys[i : i + 8]:
                tx.set(key, PAYLOAD)


async def mixed(
    st: stampede.Stampede, keys: list[str], seconds: float, tasks: int = 16
) -> dict[str, Any]:
    """95% read / 5% write transactions of 4 random keys, `tasks` in flight."""
    rng = random.Random(95)
    reads: list[float] = []
    writes: list[float] = []
    rounds: dict[int, int] = {}
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < stop:
            chosen = rng.sample(keys, 4)
            started = time.perf_counter()
            if rng.random() < 0.05:
                async with st.transaction() as tx:
                    for key in chosen:
                        tx.set(key, PAYLOAD)
                writes.append(time.perf_counter() - started)
            else:
                got = await st.read_atomic(chosen)
                reads.append(time.perf_counter() - started)
                rounds[got.rounds] = rounds.get(got.rounds, 0) + 1

    await asyncio.gather(*(loop() for _ in range(tasks)))
    total = sum(rounds.values())
    return {
        "keys": len(keys),
        "reads": total,
        "writes": len(writes),
        "one_round": rounds.get(1, 0) / total,
        "max_rounds": max(rounds),
        "rounds": rounds,
        "read_p50_us": pct(reads, 0.5),
        "read_p99_us": pct(reads, 0.99),
        "write_p50_us": pct(writes, 0.5),
        "write_p99_us": pct(writes, 0.99),
    }


Op = Callable[[], Awaitable[Any]]


async def latency(ops: dict[str, Op], seconds: float, slices: int = 10) -> dict[str, Any]:
    """p50/p99 of each op at concurrency 1, in alternating slices."""
    samples: dict[str, list[float]] = {name: [] for name in ops}
    for op in ops.values():
        for _ in range(50):
            await op()
    for s in range(slices):
        names = list(ops)
        for name in names[s % len(names) :] + names[: s % len(names)]:
            stop = time.perf_counter() + seconds / slices / len(ops)
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await ops[name]()
                samples[name].append(time.perf_counter() - started)
    return {
        name: {"p50_us": pct(v, 0.5), "p99_us": pct(v, 0.99), "n": len(v)}
        for name, v in samples.items()
    }


def raw_reader(kind: str, raw: Any, st: stampede.Stampede, keys: list[str]) -> Op:
    if kind == "cluster":

        async def cluster_read() -> Any:
            pipe = raw.pipeline()
            for key in keys:
                pipe.get(key)
            return await pipe.execute()

        return cluster_read
    names = st.topology.shard_names
    by_shard: dict[int, list[str]] = {}
    for key in keys:
        by_shard.setdefault(names.index(st.topology.shard_of(key.encode())), []).append(key)

    async def shards_read() -> Any:
        async def one(i: int, ks: list[str]) -> Any:
            pipe = raw[i].pipeline(transaction=False)
            for k in ks:
                pipe.get(k)
            return await pipe.execute()

        return await asyncio.gather(*(one(i, ks) for i, ks in by_shard.items()))

    return shards_read


async def memory(st: stampede.Stampede, keys: list[str]) -> dict[str, Any]:
    """Bytes per key: a transaction's data key and version hash, a stamped write, a raw SET."""
    topo = st.topology
    data, side, fields = [], [], []
    for key in keys:
        raw = key.encode()
        sk = side_key(raw, topo.slot_of)
        data.append(await topo.execute(raw, "MEMORY", "USAGE", raw, "SAMPLES", "0"))
        side.append(await topo.execute(sk, "MEMORY", "USAGE", sk, "SAMPLES", "0") or 0)
        fields.append(await topo.execute(sk, "HLEN", sk))
    stamped, plain = [], []
    for i in range(len(keys)):
        key = f"mem:{{s{i}}}:a"
        await st.write(f"mem:{{s{i}}}", {key: PAYLOAD})
        stamped.append(await topo.execute(key.encode(), "MEMORY", "USAGE", key, "SAMPLES", "0"))
        rawkey = f"mem:raw:{i}"
        await topo.execute(rawkey.encode(), "SET", rawkey, PAYLOAD)
        plain.append(await topo.execute(rawkey.encode(), "MEMORY", "USAGE", rawkey))
    return {
        "txn_data_bytes": statistics.mean(data),
        "txn_side_bytes": statistics.mean(side),
        "txn_side_fields": statistics.mean(fields),
        "stamped_bytes": statistics.mean(stamped),
        "raw_bytes": statistics.mean(plain),
    }


async def fields_of(st: stampede.Stampede, keys: list[str]) -> dict[str, float]:
    """Per version hash: fields, versions kept (d: fields plus the current one), bytes."""
    topo = st.topology
    counts, kept, sizes = [], [], []
    for key in keys:
        sk = side_key(key.encode(), topo.slot_of)
        names = await topo.execute(sk, "HKEYS", sk)
        counts.append(len(names))
        kept.append(1 + sum(1 for n in names if n.startswith(b"d:")))
        sizes.append(await topo.execute(sk, "MEMORY", "USAGE", sk, "SAMPLES", "0") or 0)
    return {
        "fields_mean": statistics.mean(counts),
        "fields_max": max(counts),
        "versions_mean": statistics.mean(kept),
        "versions_max": max(kept),
        "bytes_mean": statistics.mean(sizes),
    }


async def storage(st: stampede.Stampede, seconds: float) -> dict[str, Any]:
    """Sustained write transactions over 100 keys; the version hashes during and after."""
    keys = [f"gc:{i}" for i in range(100)]
    await seed(st, keys)
    rng = random.Random(5)
    stop = time.perf_counter() + seconds
    samples: list[dict[str, float]] = []
    txns = 0

    async def writer() -> None:
        nonlocal txns
        while time.perf_counter() < stop:
            async with st.transaction() as tx:
                for key in rng.sample(keys, 4):
                    tx.set(key, PAYLOAD)
            txns += 1

    async def sampler() -> None:
        while time.perf_counter() < stop:
            await asyncio.sleep(seconds / 4)
            samples.append(await fields_of(st, keys))

    await asyncio.gather(*(writer() for _ in range(4)), sampler())
    await asyncio.sleep(GRACE + 0.1)
    visited = await sweep(st.topology, grace=GRACE)
    after = await fields_of(st, keys)
    return {
        "txns": txns,
        "txns_per_s": txns / seconds,
        "during": samples,
        "after_sweep": after,
        "swept": visited,
    }


async def run_topology(kind: str, seconds: float) -> dict[str, Any]:
    servers: Any = LocalCluster(3) if kind == "cluster" else LocalPrimaries(3)
    with servers:
        if kind == "cluster":
            st = stampede.connect(servers.url, cluster=True, version_grace=GRACE)
            raw: Any = RedisCluster.from_url(servers.url)
        else:
            st = stampede.connect(servers.urls, version_grace=GRACE)
            raw = [Redis.from_url(u) for u in servers.urls]
        async with st:
            wide = [f"ramp:{i}" for i in range(1000)]
            await seed(st, wide)
            out: dict[str, Any] = {"mixed_1000": await mixed(st, wide, seconds)}
            out["mixed_100"] = await mixed(st, wide[:100], seconds)
            four = wide[500:504]
            group = [f"sg:{i}" for i in range(4)]
            await st.write("sg", dict.fromkeys(group, PAYLOAD))
            out["latency"] = await latency(
                {
                    "read_atomic (4 keys)": lambda: st.read_atomic(four),
                    "stamp-mode group read (4 keys)": lambda: st.read("sg", group),
                    "raw redis-py GETs (4 keys)": raw_reader(kind, raw, st, four),
                },
                seconds,
            )
            out["latency_write"] = await latency(
                {
                    "transaction (4 keys)": lambda: _txn(st, four),
                    "stamp-mode group write (4 keys)": lambda: st.write(
                        "sg", dict.fromkeys(group, PAYLOAD)
                    ),
                },
                seconds,
            )
            out["memory"] = await memory(st, wide[:200])
            await asyncio.sleep(GRACE + 0.1)
            await sweep(st.topology, grace=GRACE)
            out["memory_after_sweep"] = await memory(st, wide[:200])
            out["storage"] = await storage(st, seconds)
        if kind == "cluster":
            await raw.aclose()
        else:
            for client in raw:
                await client.aclose()
    return out


async def _txn(st: stampede.Stampede, keys: list[str]) -> None:
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, PAYLOAD)


def report(data: dict[str, Any]) -> None:
    print(f"# read-atomic transactions ({platform.node()}, {time.strftime('%Y-%m-%d')})")
    for kind, res in data.items():
        print(f"\n## {kind}")
        for name in ("mixed_1000", "mixed_100"):
            m = res[name]
            print(
                f"{name}: {m['reads']} reads, {m['writes']} writes; one round "
                f"{m['one_round'] * 100:.3f}%, max rounds {m['max_rounds']}; read p50/p99 "
                f"{m['read_p50_us']:.0f}/{m['read_p99_us']:.0f} us; write p50/p99 "
                f"{m['write_p50_us']:.0f}/{m['write_p99_us']:.0f} us"
            )
        for section in ("latency", "latency_write"):
            for op, f in res[section].items():
                print(f"  {op:34} p50 {f['p50_us']:7.0f} us  p99 {f['p99_us']:7.0f} us  n={f['n']}")
        for name in ("memory", "memory_after_sweep"):
            print(f"{name}: {json.dumps({k: round(v, 1) for k, v in res[name].items()})}")
        s = res["storage"]
        print(f"storage: {s['txns']} txns ({s['txns_per_s']:.0f}/s), swept {s['swept']}")
        for i, sample in enumerate(s["during"]):
            print(f"  during {i}: {json.dumps({k: round(v, 2) for k, v in sample.items()})}")
        after = {k: round(v, 2) for k, v in s["after_sweep"].items()}
        print(f"  after grace + sweep: {json.dumps(after)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only", choices=["shards", "cluster"])
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["shards", "cluster"]
    data = {kind: asyncio.run(run_topology(kind, args.seconds)) for kind in kinds}
    report(data)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(data, fh, indent=2)


if __name__ == "__main__":
    main()
