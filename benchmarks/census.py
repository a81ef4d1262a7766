"""Key census ("nothing immortal"): every key stampede makes expires or is collected.

    python -m benchmarks.census [--seconds 60] [--tasks 16] [--only shards|cluster] [--shared]

On 3 independent primaries and on a 3-master cluster, with short grace windows
(`version_grace` 0.5 s, `tombstone_grace` 1 s): `--tasks` tasks run for `--seconds`
a mix of group writes (stamp and commit mode, HybridClock and `versions="counter"`,
half with a `ttl`), group deletes, `update`s, group reads, transactions (`set` and
`delete` of 2-4 keys, one slot or several, half with a `ttl`) and `read_atomic`s.
Each family of 3-key groups keeps one mode and one version source; transactions
have keys of their own, unless `--shared` adds commit-mode groups whose keys
transactions write and delete too. Then it waits until every server's clock has
passed the longest ttl and grace windows, and runs `sweep_versions`.

At the end of the load, before and after the sweep, it SCANs every primary with
raw redis-py and classifies every key. A stampede key is NEEDED when something
still depends on it: a version hash with the `m:` field of its data key's current
stamp, a commit record or Counter whose group has live data, the shard identity
record, a repair stream, a tombstone whose grace still runs (kept versions past
the grace window and markers of finished operations are not). It passes when,
after the sweep, no stampede key is both not needed and without expiry
(PEXPIRETIME -1); otherwise it prints FAIL with examples and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

import stampede
from stampede import Envelope, MalformedEnvelope, ReadError, WriteError
from stampede.repair import sweep_versions
from stampede.testing import LocalCluster, LocalPrimaries
from stampede.wire import COMMIT_SUFFIX, COUNTER_SUFFIX, decode_commit, version_hash_key

PAYLOAD = b"x" * 64
VERSION_GRACE = 0.5
TOMBSTONE_GRACE = 1.0
TTLS: tuple[float | None, ...] = (None, None, 0.5, 1.5)
GROUPS = 96  # per family: even ones tagged (one slot), odd ones spread over the shards
TX_KEYS = 96  # per shape of transaction key
MIN_OPS = 25  # per task
FAMILIES: dict[str, tuple[Literal["stamp", "commit"], Literal["hybrid", "counter"]]] = {
    "gs": ("stamp", "hybrid"),
    "gc": ("commit", "hybrid"),
    "ns": ("stamp", "counter"),
    "nc": ("commit", "counter"),
    "sh": ("commit", "hybrid"),  # --shared: transactions write these groups' keys too
}
DATA_KINDS = ("live data", "tombstone", "not stampede's")
OWN_KINDS: tuple[str, ...] = ("kept versions", "version hash", "commit record", "counter")
OWN_KINDS += ("identity record", "op marker", "repair stream")
ALWAYS_NEEDED = ("live data", "not stampede's", "identity record", "repair stream")


def group_name(family: str, i: int) -> str:
    return f"{family}:{{{i}}}" if i % 2 == 0 else f"{family}:{i}"


def group_keys(group: bytes) -> list[bytes]:
    return [group + b":" + part for part in (b"a", b"b", b"c")]


def tx_pick(rng: random.Random) -> list[str]:
    """2 keys of one tag (a one-slot transaction), or 2-4 keys of the three shapes:
    plain (`{<key>}:stampede:v:u`), tagged (`<key>:stampede:v`) and braces without
    a tag (`stampede:v:{<n>}:<key>`)."""
    if rng.random() < 0.3:
        tag = rng.randrange(TX_KEYS // 2)
        return [f"tt:{{{tag}}}:{p}" for p in rng.sample("ab", 2)]
    shapes = ("tp:{}", "tt:{{{}}}:a", "ta{{}}:{}")
    picked = {rng.choice(shapes).format(rng.randrange(TX_KEYS)) for _ in range(rng.randint(2, 4))}
    return sorted(picked)


@dataclass
class LoadStats:
    ops: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    keys_written: int = 0
    seconds: float = 0.0


async def request(
    st: stampede.Stampede, rng: random.Random, families: list[str], stats: LoadStats
) -> None:
    """One request of the mix, on a random group (or transaction keys)."""
    family = rng.choice(families)
    mode, source = FAMILIES[family]
    i = rng.randrange(GROUPS)
    group = group_name(family, i)
    keys = [k.decode() for k in group_keys(group.encode())]
    ttl, r = rng.choice(TTLS), rng.random()
    if r < 0.30:
        await st.write(group, dict.fromkeys(keys, PAYLOAD), mode=mode, versions=source, ttl=ttl)
        op, written = "write", len(keys)
    elif r < 0.38:
        await st.delete(group, keys, mode=mode, versions=source)
        op, written = "delete", len(keys)
    elif r < 0.43 and source == "hybrid" and i % 2 == 0:
        await st.update(group, keys, lambda c: dict.fromkeys(c, PAYLOAD), mode=mode, ttl=ttl)
        op, written = "update", len(keys)
    elif r < 0.60:
        await st.read(group, keys, mode=mode)
        op, written = "read", 0
    elif r < 0.82:
        chosen = rng.sample(keys, rng.randint(1, 3)) if family == "sh" else tx_pick(rng)
        async with st.transaction(ttl=ttl) as tx:
            for key in chosen:
                if rng.random() < 0.2:
                    tx.delete(key)
                else:
                    tx.set(key, PAYLOAD)
        op, written = "transaction", len(chosen)
    else:
        await st.read_atomic(tx_pick(rng))
        op, written = "read_atomic", 0
    stats.ops[op] += 1
    stats.keys_written += written


async def load(
    st: stampede.Stampede, seconds: float, tasks: int, *, seed: int, shared: bool
) -> LoadStats:
    stats = LoadStats()
    families = list(FAMILIES) if shared else [f for f in FAMILIES if f != "sh"]
    stop = time.perf_counter() + seconds

    async def task(n: int) -> None:
        rng, done = random.Random(seed * 1000 + n), 0
        while done < MIN_OPS or time.perf_counter() < stop:  # MIN_OPS however slow the machine
            done += 1
            try:
                await request(st, rng, families, stats)
            except (ReadError, WriteError) as exc:  # counted and shown, never hidden
                stats.errors[type(exc).__name__] += 1

    started = time.perf_counter()
    await asyncio.gather(*(task(n) for n in range(tasks)))
    stats.seconds = time.perf_counter() - started
    return stats


@dataclass
class Key:
    name: bytes
    type: str
    expire_in: int | None  # ms left (PEXPIRETIME minus the server's TIME); None: no expiry
    value: bytes | None = None
    fields: dict[bytes, bytes] | None = None


async def scan_node(client: Redis) -> list[Key]:
    """Every key of one server, with its type, expiry and content."""
    now_ms = await server_ms([client])
    found: list[Key] = []
    cursor: int = 0
    while True:
        cursor, names = await client.scan(cursor, count=1000)
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.type(name)
            pipe.execute_command("PEXPIRETIME", name)
        head = await pipe.execute()
        pipe, batch = client.pipeline(transaction=False), []
        for n, name in enumerate(names):
            kind, at = head[2 * n].decode(), int(head[2 * n + 1])
            if kind == "none":
                continue  # expired or deleted since the SCAN
            raw = name if isinstance(name, bytes) else name.encode()
            batch.append(Key(raw, kind, None if at < 0 else max(0, at - now_ms)))
            if kind == "string":
                pipe.get(name)
            elif kind == "hash":
                pipe.hgetall(name)
            else:
                pipe.exists(name)
        for entry, reply in zip(batch, await pipe.execute(), strict=True):
            if entry.type == "string":
                entry.value = reply
            elif entry.type == "hash":
                entry.fields = reply
        found.extend(batch)
        if cursor == 0:
            return found


def envelope(key: Key | None) -> Envelope | None:
    if key is None or key.value is None:
        return None
    try:
        return Envelope.decode(key.value)
    except MalformedEnvelope:
        return None


def kind_of(key: Key) -> str:
    name = key.name
    if name == b"stampede:shard":
        return "identity record"
    if name.startswith(b"stampede:op:"):
        return "op marker"
    if name.startswith((b"stampede:repairs", b"{stampede:repairs}")):
        return "repair stream"
    if name.endswith(COMMIT_SUFFIX):
        return "commit record"
    if name.endswith(COUNTER_SUFFIX):
        return "counter"
    if name.endswith((b":stampede:p", b":stampede:p:u")):
        return "kept versions"
    if name.endswith((b":stampede:v", b":stampede:v:u")) or name.startswith(b"stampede:v:{"):
        return "version hash"
    env = envelope(key)
    if env is None:
        return "not stampede's"
    return "tombstone" if env.tombstone else "live data"


def judge(keys: list[Key]) -> dict[str, Any]:
    """Per kind: count, with and without expiry, not needed, not needed without expiry
    ("immortal"), the longest expiry of a key not needed; examples of immortal keys."""
    by_name = {k.name: k for k in keys}

    def live(name: bytes) -> bool:
        env = envelope(by_name.get(name))
        return env is not None and not env.tombstone

    def needed(key: Key, kind: str) -> bool:
        if kind in ALWAYS_NEEDED:
            return True
        if kind == "tombstone":
            return key.expire_in is not None  # its grace still runs
        if kind == "version hash":
            fields = key.fields or {}
            env = envelope(by_name.get(fields.get(b"k", b"")))
            return env is not None and b"m:" + env.stamp.encode() in fields
        if kind == "commit record":
            record = decode_commit(key.value, key.name[: -len(COMMIT_SUFFIX)])
            return record is not None and any(live(k) for k in record.keys)
        if kind == "counter":
            return any(live(k) for k in group_keys(key.name[: -len(COUNTER_SUFFIX)]))
        return False  # kept versions past the grace window; markers of finished operations

    rows: dict[str, Counter[str]] = {k: Counter() for k in (*DATA_KINDS, *OWN_KINDS)}
    immortal: dict[str, list[str]] = {}
    for key in keys:
        kind = kind_of(key)
        row = rows[kind]
        row["count"] += 1
        row["no expiry" if key.expire_in is None else "with expiry"] += 1
        if not needed(key, kind):
            row["not needed"] += 1
            if key.expire_in is None:
                row["immortal"] += 1
                immortal.setdefault(kind, []).append(describe(key, by_name))
            else:
                row["longest s"] = max(row["longest s"], -(-key.expire_in // 1000))
    data, own = max(1, rows["live data"]["count"]), sum(rows[k]["count"] for k in OWN_KINDS)
    own -= rows["identity record"]["count"]
    ratio = f"{own / data:.2f} ({(own - rows['op marker']['count']) / data:.2f})"
    return {"rows": rows, "immortal": immortal, "own_per_live": ratio}


def describe(key: Key, by_name: dict[bytes, Key]) -> str:
    """One line about a leaking key: its fields, or what its group's keys hold."""
    text = key.name.decode(errors="backslashreplace")
    if key.fields is not None:
        names = sorted(f.decode(errors="replace")[:40] for f in key.fields)
        data = by_name.get(key.fields.get(b"k", b""))
        return f"{text}: fields {names}; data key holds {envelope(data)}"
    group = group_keys(key.name.rsplit(b":stampede:", 1)[0])
    state = {k.decode(): envelope(by_name.get(k)) for k in group}
    return f"{text} = {(key.value or b'')[:50]!r}; group keys: {state}"


async def census(clients: list[Redis]) -> dict[str, Any]:
    found = await asyncio.gather(*(scan_node(c) for c in clients))
    return judge([k for node in found for k in node])


async def server_ms(clients: list[Redis]) -> int:
    times = await asyncio.gather(*(c.time() for c in clients))
    return min(int(s) * 1000 + int(us) // 1000 for s, us in times)


async def wait_until(clients: list[Redis], target_ms: int) -> None:
    """Until every server's clock has reached `target_ms` (its keys expire by it)."""
    while True:
        now = await server_ms(clients)
        if now >= target_ms:
            return
        await asyncio.sleep(min(0.25, (target_ms - now) / 1000 + 0.01))


async def run_topology(kind: str, seconds: float, tasks: int, shared: bool) -> dict[str, Any]:
    servers: Any = LocalCluster(3) if kind == "cluster" else LocalPrimaries(3)
    options = stampede.Options(version_grace=VERSION_GRACE, tombstone_grace=TOMBSTONE_GRACE)
    with servers:
        if kind == "cluster":
            st = stampede.connect(servers.url, cluster=True, options=options)
            clients = [Redis.from_url(node.url) for node in servers.masters]
        else:
            st = stampede.connect(servers.urls, options=options)
            clients = [Redis.from_url(url) for url in servers.urls]
        try:
            async with st:
                for n in range(TX_KEYS):  # warm the version-hash names' slot search (~8 ms each)
                    version_hash_key(f"ta{{}}:{n}".encode(), st.topology.slot_of)
                stats = await load(st, seconds, tasks, seed=1, shared=shared)
                ended = await server_ms(clients)
                out: dict[str, Any] = {"load": stats, "end": await census(clients)}
                longest = max(TOMBSTONE_GRACE, *(t for t in TTLS if t is not None))
                await wait_until(clients, ended + round((longest + VERSION_GRACE) * 1000) + 100)
                out["grace"] = await census(clients)
                out["swept"] = await sweep_versions(st.topology, grace=VERSION_GRACE)
                out["sweep"] = await census(clients)
        finally:
            for client in clients:
                await client.aclose()
    return out


COLUMNS = ("count", "with expiry", "no expiry", "not needed", "immortal", "longest s")
HEADER = "| kind | count | expiry | no expiry | not needed | not needed, no expiry | expires in |"


def table(result: dict[str, Any]) -> list[str]:
    lines = [HEADER, "| --- |" + " ---: |" * len(COLUMNS)]
    for kind, row in result["rows"].items():
        if row["count"]:
            cells = [f"{row[c]:,}" for c in COLUMNS[:-1]]
            cells.append(f"{row['longest s']:,} s" if row["longest s"] else "")
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def report(data: dict[str, dict[str, Any]], args: argparse.Namespace) -> bool:
    print(f"# key census ({platform.node()}, {time.strftime('%Y-%m-%d')})")
    print(
        f"load {args.seconds:g} s per topology, {args.tasks} tasks, shared keys "
        f"{'on' if args.shared else 'off'}; version_grace {VERSION_GRACE} s, tombstone_grace "
        f"{TOMBSTONE_GRACE} s, ttl one of {TTLS}"
    )
    passed = True
    for kind, res in data.items():
        stats: LoadStats = res["load"]
        total = sum(stats.ops.values())
        print(f"\n## {kind}")
        print(
            f"load: {total:,} operations in {stats.seconds:.1f} s "
            f"({total / stats.seconds:,.0f}/s), {stats.keys_written:,} keys written; "
            f"{dict(sorted(stats.ops.items()))}"
        )
        print(f"errors: {dict(stats.errors) or 'none'}")
        print(
            "stampede keys per live data key (without op markers): "
            f"end of load {res['end']['own_per_live']}, after the grace windows "
            f"{res['grace']['own_per_live']}, after the sweep {res['sweep']['own_per_live']} "
            f"(the sweep visited {res['swept']:,} version hashes)"
        )
        for label, name in (("before the sweep", "grace"), ("after the sweep", "sweep")):
            print(f"\n{label} (past every grace window):")
            print("\n".join(table(res[name])))
        for leak, examples in res["sweep"]["immortal"].items():
            passed = False
            print(f"\nLEAK {kind}: {len(examples):,} {leak} key(s) not needed, without expiry:")
            for line in examples[:5]:
                print(f"  {line}")
    if passed:
        where = ", ".join(data)
        print(f"\nPASS: after the sweep every stampede key is needed or expires ({where})")
    else:
        print("\nFAIL: stampede keys that are not needed never expire (the LEAK lines above)")
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--only", choices=["shards", "cluster"])
    parser.add_argument("--shared", action="store_true", help="transactions write group keys too")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["shards", "cluster"]
    data = {k: asyncio.run(run_topology(k, args.seconds, args.tasks, args.shared)) for k in kinds}
    if not report(data, args):
        sys.exit(1)


if __name__ == "__main__":
    main()
