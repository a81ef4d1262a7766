"""What a guarded write costs the server, against plain `MSET` of the same keys.

    python -m benchmarks.server_cost [--groups 2000] [--rounds 3]

Three local primaries; 4-key groups spread over them (the keys of one group on
several servers, as `benchmarks.ceiling` writes them). Each row writes every group
`--rounds` times (the first round creates the keys, the later ones replace values,
which is when the guard keeps what it replaces), on the same servers:

- **MSET**: raw redis-py, one `MSET` per server of that group's keys there;
- **stampede write (stamp)**: `st.write(group, values)`: the guarded script;
- **stampede write (commit)**: the same with a commit record (`mode="commit"`);
- **stampede transaction**: the same keys as a read-atomic transaction (prepare and
  commit scripts).

The rows take turns round by round (64 writes in flight, as the other benchmarks),
so that a busy spell of the machine does not land on one row alone; each row has
key names of its own, chosen so that each of its keys lives on the same server as
the `MSET` row's key in the same place (the same spread, call by call).

Server CPU is read from `INFO commandstats` around each row's round: the microseconds of
the top-level commands the row sent (a script's inner commands are inside its own
`EVALSHA` time, so they are not added again), summed over the servers, per key
written, and as a ratio to `MSET`'s. `INFO cpu` (the server processes' user+system
time) is printed beside it as a check. Nothing is asserted: the figures go into
docs/performance.md. `python -m benchmarks.ceiling` runs the same rows (`measure`) as
a phase of its own, on its servers, and reports the stamped write's ratio among the
performance targets. For counts that do not move with the machine's load, see
`benchmarks.server_instructions`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

import stampede
from stampede.testing import LocalPrimaries

Write = Callable[[int], Awaitable[object]]
KEYS_PER_GROUP = 4
VALUE = b"v" * 32
TOP_LEVEL = {
    "MSET": ("mset",),
    "stampede write (stamp)": ("evalsha", "eval"),
    "stampede write (commit)": ("evalsha", "eval"),
    "stampede transaction": ("evalsha", "eval"),
}


def group_keys(g: int) -> list[str]:
    return [f"cost:{g}:{part}" for part in "abcd"]


def row_keys(st: stampede.Stampede, row: int, groups: int) -> list[list[str]]:
    """Row `row`'s keys of each group: names of its own, each on the server that
    holds the `MSET` row's key in the same place (row 0: `group_keys` itself)."""
    if row == 0:
        return [group_keys(g) for g in range(groups)]
    shard = st.topology.shard_of
    out: list[list[str]] = []
    for g in range(groups):
        keys = []
        for base in group_keys(g):
            home, n = shard(base.encode()), 0
            while shard(f"{base}:{row}:{n}".encode()) != home:
                n += 1
            keys.append(f"{base}:{row}:{n}")
        out.append(keys)
    return out


async def _stats(clients: list[Redis]) -> tuple[dict[str, int], float]:
    """Per command, usec summed over the servers; the servers' CPU seconds."""
    usec: dict[str, int] = {}
    cpu = 0.0
    for client in clients:
        stats: dict[str, Any] = await client.info("commandstats")
        for name, fields in stats.items():
            command = name.removeprefix("cmdstat_")
            usec[command] = usec.get(command, 0) + int(fields["usec"])
        info: dict[str, Any] = await client.info("cpu")
        cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return usec, cpu


def writers(st: stampede.Stampede, clients: list[Redis], groups: int) -> dict[str, Write]:
    """The rows: each writes one group `g` (its own keys of group `g`) its own way."""
    index = {name: i for i, name in enumerate(st.topology.shard_names)}
    mset_keys, stamp_keys, commit_keys, txn_keys = (row_keys(st, r, groups) for r in range(4))

    async def mset(g: int) -> object:
        by_server: dict[int, dict[str, bytes]] = {}
        for key in mset_keys[g]:
            shard = index[st.topology.shard_of(key.encode())]
            by_server.setdefault(shard, {})[key] = VALUE
        return await asyncio.gather(*(clients[s].mset(values) for s, values in by_server.items()))

    async def stamp(g: int) -> object:
        return await st.write(f"cost:{g}", dict.fromkeys(stamp_keys[g], VALUE))

    async def commit(g: int) -> object:
        values = dict.fromkeys(commit_keys[g], VALUE)
        return await st.write(f"cost:c:{g}", values, mode="commit")

    async def transaction(g: int) -> object:
        async with st.transaction() as tx:
            for key in txn_keys[g]:
                tx.set(key, VALUE)
        return tx.receipt

    return {
        "MSET": mset,
        "stampede write (stamp)": stamp,
        "stampede write (commit)": commit,
        "stampede transaction": transaction,
    }


async def measure(
    prim: LocalPrimaries, st: stampede.Stampede, groups: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Per row: (server usec per key from commandstats, server CPU usec per key), on
    `prim`'s servers through `st` (connected to them), the rows taking turns round
    by round. FLUSHALL first: run it when nothing else needs the servers' keys
    (`benchmarks.ceiling` runs it last)."""
    clients = [Redis.from_url(url) for url in prim.urls]
    try:
        rows = writers(st, clients, groups)
        top = dict.fromkeys(rows, 0)
        cpu = dict.fromkeys(rows, 0.0)
        prim.flushall()
        for _ in range(rounds):
            for name, write in rows.items():  # the rows take turns, a round each
                before, cpu_before = await _stats(clients)
                for start in range(0, groups, 64):  # 64 in flight, as the other benchmarks
                    await asyncio.gather(*(write(g) for g in range(start, min(groups, start + 64))))
                after, cpu_after = await _stats(clients)
                top[name] += sum(after.get(c, 0) - before.get(c, 0) for c in TOP_LEVEL[name])
                cpu[name] += cpu_after - cpu_before
    finally:
        for client in clients:
            await client.aclose()
    keys = groups * rounds * KEYS_PER_GROUP
    return {name: (top[name] / keys, cpu[name] * 1e6 / keys) for name in rows}


def guard_ratio(results: dict[str, tuple[float, float]]) -> float:
    """The target's figure: commandstats per key of the stamped write over MSET's."""
    return results["stampede write (stamp)"][0] / results["MSET"][0]


async def run(groups: int, rounds: int) -> dict[str, tuple[float, float]]:
    """`measure` on three local primaries of its own."""
    with LocalPrimaries(3) as prim:
        async with stampede.connect(prim.urls) as st:
            return await measure(prim, st, groups, rounds)


def report(results: dict[str, tuple[float, float]], groups: int, rounds: int) -> None:
    base_top, base_cpu = results["MSET"]
    print(
        f"server cost per key written: 3 primaries, {groups} groups of {KEYS_PER_GROUP} keys, "
        f"{rounds} rounds (target for the stamped write: <= 6x MSET)"
    )
    print(f"  {'row':<26} {'commandstats':>14} {'vs MSET':>8} {'server CPU':>12} {'vs MSET':>8}")
    for name, (top, cpu) in results.items():
        print(
            f"  {name:<26} {top:11.2f} us {top / base_top:7.1f}x "
            f"{cpu:9.2f} us {cpu / base_cpu:7.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    report(asyncio.run(run(args.groups, args.rounds)), args.groups, args.rounds)


if __name__ == "__main__":
    main()
