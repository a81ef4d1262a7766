"""stampede against the ceiling and other Python clients, on the same servers in one run,
and every performance target of docs/performance.md measured side by side.

    python -m benchmarks.ceiling [--seconds 1.0] [--slices 3] [--json out.json]
    python -m benchmarks.ceiling --only stampede   # the ceiling and stampede's rows only
    python -m benchmarks.ceiling --cost-groups 0   # without the server-cost phase
    python -m benchmarks.ceiling --loop uvloop     # every row on uvloop's event loop
    python -m benchmarks.ceiling --profile ['stampede write']   # where a row spends its CPU
                                 # (SORT=cumulative LINES=60 for another view)

Three local primaries; 4-key groups drawn from 256 (keys spread over the
primaries). Rows, each a read and a write of one group:

- **ceiling**: a bare asyncio + hiredis client written here, one connection per
  server, that merges the keys of every request pending at one moment into one
  MGET (MSET) per server: the most keys per second a Python client moves here;
- **stampede**: stamped group reads and writes (`st.read`, `st.write`, HybridClock);
  **stampede transaction**, a read-atomic transaction (`st.transaction()`) setting
  the 4 keys of a group, and **stampede write (txn keys)**, the group write of
  those same keys, its yardstick (other key names than the read row's);
- **redis-py**: one pipeline of GETs (SETs) per server, in parallel;
- **valkey-glide**, **coredis**: MGET (MSET) per server, in parallel (the `bench`
  extra installs them; a missing one is skipped with a note).

Each contender runs `--slices` slices of `--seconds` at 64 requests in flight,
alternating with the others so machine noise hits all alike, then `--slices`
alternating slices at concurrency 1 for latency (`min(seconds, 1)` a row in all).
Printed: keys/s at 64, that as % of the ceiling, p50 and p99 at 64, mean and p50
µs per operation at 1, and client CPU µs per operation at 64.

Then, on the same servers and client, the server-cost phase (`benchmarks.server_cost`:
MSET, stamped, commit-mode and transaction writes of `--cost-groups` groups, `CONFIG
RESETSTAT` before and `INFO commandstats` after each row; it flushes the servers, so
it runs last). The run ends with the targets table: each target, this run's figure,
its bound, met or not (`--json` writes the figures, the server cost and the targets).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.metadata
import json
import os
import platform
import pstats
import random
import re
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, cast

import hiredis
from redis.asyncio import Redis

import stampede
from benchmarks import server_cost
from stampede.testing import LocalPrimaries
from stampede.topology._guard import GUARD_SCRIPT, GUARD_SHA, KEEP_MS
from stampede.wire import new_token

Op = Callable[[int], Awaitable[Any]]
Cost = dict[str, tuple[float, float]]
TXN = "stampede transaction"
TXN_WRITE = "stampede write (txn keys)"
"""The group write of the transaction's keys: the transaction row's yardstick."""
CHECKED = "ceiling checked read"
"""The ceiling client parsing and comparing each value's stamp (`Ceiling.checked`): the
least a stamped read checks, the floor under stampede's read row."""
STAMP = re.compile(rb"\d+:[0-9A-HJKMNP-TV-Z]{26}:")
"""A stored envelope's stamp, `<version>:<token>:` (what `Ceiling.checked` compares)."""
BARE_GUARD = "ceiling guarded write"
"""The ceiling client running stampede's guard script (`Ceiling.guarded`): what the
server's script alone leaves of the ceiling, the floor under stampede's write row."""
GROUPS = 256
KEYS_PER_GROUP = 4
IN_FLIGHT = 64
VALUE = b"v" * 32


def group_keys(g: int) -> list[str]:
    return [f"bench:{g}:{part}" for part in "abcd"]


def txn_keys(g: int) -> list[str]:
    """The keys the transaction row and the group write it is compared with both write
    (the same 4-key spread groups as `group_keys`, other names: reads stay on theirs)."""
    return [f"bench:tx:{g}:{part}" for part in "abcd"]


def bare_keys(g: int) -> list[str]:
    """What the bare guarded writer writes (the same spread, other names)."""
    return [f"bench:bare:{g}:{part}" for part in "abcd"]


def plain_keys(g: int) -> list[str]:
    """What the plain (unstamped) writers write: other keys than stampede's groups."""
    return [f"plain:{g}:{part}" for part in "abcd"]


# -- the ceiling: a bare merging client ------------------------------------------------


class _Conn(asyncio.Protocol):
    """One connection; batches go out in order and come back in order."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no instance)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            self.waiting.popleft().set_result(reply)

    def send(self, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        assert self.transport is not None
        self.transport.write(hiredis.pack_command(command))
        return future


Entry = tuple[list[bytes], Callable[[Any], None], list[Any]]
"""A request pending in a merger: its keys, its callback, its arguments (a guarded
write's stamp and values; none for a read or a plain write)."""


class _Merger:
    """Every request pending on one server goes out as one MGET (or MSET)."""

    def __init__(self, conn: _Conn, write: bool) -> None:
        self.conn = conn
        self.write = write
        self.pending: list[Entry] = []
        self.busy = False

    def submit(self, keys: list[bytes], done: Callable[[Any], None], argv: Any = ()) -> None:
        self.pending.append((keys, done, argv))
        if not self.busy:
            self.busy = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            self.busy = False
            return
        command = self.command(batch)
        self.conn.send(command).add_done_callback(lambda f: self.answered(batch, f.result()))

    def command(self, batch: list[Entry]) -> tuple[Any, ...]:
        flat = [k for keys, _, _ in batch for k in keys]
        if self.write:
            return ("MSET", *[p for k in flat for p in (k, VALUE)])
        return ("MGET", *flat)

    def answered(self, batch: list[Entry], reply: Any) -> None:
        pos = 0
        for keys, done, _ in batch:
            done(reply if self.write else reply[pos : pos + len(keys)])
            pos += len(keys)
        self.flush()


class _GuardMerger(_Merger):
    """Every guarded write pending on one server goes out as one `EVALSHA` of stampede's
    guard script, laid out as stampede's coalescer lays out a batch (a lone write: its
    stamp, then its values; more: per write its key count, its stamp, its values)."""

    def __init__(self, conn: _Conn) -> None:
        super().__init__(conn, write=True)

    def command(self, batch: list[Entry]) -> tuple[Any, ...]:
        keys = [k for ks, _, _ in batch for k in ks]
        if len(batch) == 1:
            argv = batch[0][2]
        else:
            argv = [a for ks, _, stamped in batch for a in (len(ks), *stamped)]
        return ("EVALSHA", GUARD_SHA, len(keys), *keys, *argv)

    def answered(self, batch: list[Entry], reply: Any) -> None:
        if isinstance(reply, Exception) or min(reply) < 1:  # a layout the guard refuses
            raise RuntimeError(f"the guard did not write every key of the batch: {reply!r}")
        super().answered(batch, reply)


class Ceiling:
    """The merging client: one connection and one merger per server and direction (and
    one more for the bare guarded write)."""

    def __init__(self, addresses: list[tuple[str, int]], shard_of: Callable[[bytes], int]):
        self.addresses = addresses
        self.shard_of = shard_of
        self.readers: list[_Merger] = []
        self.writers: list[_Merger] = []
        self.guards: list[_GuardMerger] = []
        self.version = 0

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        for host, port in self.addresses:
            conns = [_Conn(), _Conn(), _Conn()]
            for conn in conns:
                await loop.create_connection(lambda c=conn: c, host, port)  # type: ignore[misc]
            self.readers.append(_Merger(conns[0], write=False))
            self.writers.append(_Merger(conns[1], write=True))
            await conns[2].send(("SCRIPT", "LOAD", GUARD_SCRIPT))
            self.guards.append(_GuardMerger(conns[2]))

    def close(self) -> None:
        for conn in [m.conn for m in [*self.readers, *self.writers, *self.guards]]:
            if conn.transport is not None:
                conn.transport.close()

    def run(self, keys: list[bytes], write: bool) -> asyncio.Future[None]:
        by_shard: dict[int, list[bytes]] = {}
        for key in keys:
            by_shard.setdefault(self.shard_of(key), []).append(key)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        left = [len(by_shard)]

        def done(_: list[Any]) -> None:
            left[0] -= 1
            if not left[0]:
                future.set_result(None)

        mergers = self.writers if write else self.readers
        for shard, part in by_shard.items():
            mergers[shard].submit(part, done)
        return future

    def checked(self, keys: list[bytes]) -> asyncio.Future[bool]:
        """`keys` read as `run` reads them, each value's stamp then parsed (`STAMP`) and
        the group judged whole when every key holds one and the same stamp: the least a
        stamped read checks, without stampede's client around it (no retry, no kept
        versions, no deadline, no result object)."""
        by_shard: dict[int, list[bytes]] = {}
        for key in keys:
            by_shard.setdefault(self.shard_of(key), []).append(key)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        left = [len(by_shard)]
        got: list[Any] = []

        def done(values: list[Any]) -> None:
            got.extend(values)
            left[0] -= 1
            if not left[0]:
                stamps = {m.group(0) if (m := STAMP.match(v or b"")) else None for v in got}
                future.set_result(len(stamps) == 1 and None not in stamps)

        for shard, part in by_shard.items():
            self.readers[shard].submit(part, done)
        return future

    def guarded(self, keys: list[bytes]) -> asyncio.Future[None]:
        """`keys` written as stampede's group write writes them, by its guard script with
        a fresh clock version and token, each value an envelope (so each write keeps
        what it replaces, as stampede's does), and nothing else: no clock, no checks, no
        answer judged. What the guard costs a write without stampede's client around it."""
        self.version = max(time.time_ns(), self.version + 1)
        token = new_token()
        value = b"%d:%s:%s" % (self.version, token.encode(), VALUE)
        stamp = [self.version, token, 0, self.version + 10**10, KEEP_MS]
        by_shard: dict[int, list[bytes]] = {}
        for key in keys:
            by_shard.setdefault(self.shard_of(key), []).append(key)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        left = [len(by_shard)]

        def done(_: Any) -> None:
            left[0] -= 1
            if not left[0]:
                future.set_result(None)

        for shard, part in by_shard.items():
            self.guards[shard].submit(part, done, [*stamp, *[value] * len(part)])
        return future


# -- measuring ------------------------------------------------------------------------


async def run_for(op: Op, concurrency: int, seconds: float, lat: list[float]) -> tuple[int, float]:
    """`op` from `concurrency` loops for `seconds`; (operations, client CPU seconds)."""
    stop = time.perf_counter() + seconds
    done = 0

    async def loop(seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        while time.perf_counter() < stop:
            g = rng.randrange(GROUPS)
            t0 = time.perf_counter()
            await op(g)
            lat.append(time.perf_counter() - t0)
            done += 1

    cpu = time.process_time()
    await asyncio.gather(*(loop(i) for i in range(concurrency)))
    return done, time.process_time() - cpu


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6 if ordered else 0.0


async def measure(rows: dict[str, Op], seconds: float, slices: int) -> dict[str, dict[str, float]]:
    """Every row `slices` times at IN_FLIGHT, then `slices` times at concurrency 1 (in
    all, `min(seconds, 1)` a row), the rows alternating in both phases."""
    lat: dict[str, list[float]] = {name: [] for name in rows}
    single: dict[str, list[float]] = {name: [] for name in rows}
    ops = dict.fromkeys(rows, 0)
    cpu = dict.fromkeys(rows, 0.0)
    for _ in range(slices):
        for name, op in rows.items():
            n, c = await run_for(op, IN_FLIGHT, seconds, lat[name])
            ops[name] += n
            cpu[name] += c
    for _ in range(slices):
        for name, op in rows.items():
            await run_for(op, 1, min(seconds, 1.0) / slices, single[name])
    out: dict[str, dict[str, float]] = {}
    for name in rows:
        per_s = ops[name] / (seconds * slices)
        out[name] = {
            "ops_per_s": per_s,
            "keys_per_s": per_s * KEYS_PER_GROUP,
            "p50_us": pct(lat[name], 0.5),
            "p99_us": pct(lat[name], 0.99),
            "c1_us": statistics.fmean(single[name]) * 1e6 if single[name] else 0.0,
            "c1_p50_us": pct(single[name], 0.5),
            "cpu_us_per_op": cpu[name] / ops[name] * 1e6 if ops[name] else 0.0,
        }
    return out


# -- the contenders -----------------------------------------------------------------------


async def peers(
    stack: AsyncExitStack, addresses: list[tuple[str, int]], shard_of: Any
) -> dict[str, Op]:
    """valkey-glide and coredis rows, when installed."""
    rows: dict[str, Op] = {}
    split, plain = _splitter(shard_of), _splitter(shard_of, plain_keys)
    try:
        from glide import GlideClient, GlideClientConfiguration, NodeAddress
    except ImportError:
        print("note: valkey-glide is not installed (pip install 'stampede-redis[bench]')")
    else:
        glide = [
            await GlideClient.create(GlideClientConfiguration([NodeAddress(h, p)]))
            for h, p in addresses
        ]
        stack.push_async_callback(lambda: asyncio.gather(*(c.close() for c in glide)))
        rows["valkey-glide read"] = lambda g: asyncio.gather(
            *(glide[s].mget(ks) for s, ks in split(g))
        )
        rows["valkey-glide write"] = lambda g: asyncio.gather(
            *(glide[s].mset(dict.fromkeys(ks, VALUE)) for s, ks in plain(g))
        )
    try:
        import coredis
    except ImportError:
        print("note: coredis is not installed (pip install 'stampede-redis[bench]')")
    else:
        cored = [
            await stack.enter_async_context(coredis.Redis(host=h, port=p)) for h, p in addresses
        ]
        rows["coredis read"] = lambda g: asyncio.gather(*(cored[s].mget(ks) for s, ks in split(g)))
        rows["coredis write"] = lambda g: asyncio.gather(
            *(cored[s].mset(dict.fromkeys(ks, VALUE)) for s, ks in plain(g))
        )
    return rows


def _splitter(
    shard_of: Callable[[bytes], int], keys_of: Callable[[int], list[str]] = group_keys
) -> Callable[[int], list[tuple[int, list[str]]]]:
    plans: dict[int, list[tuple[int, list[str]]]] = {}
    for g in range(GROUPS):
        by: dict[int, list[str]] = {}
        for key in keys_of(g):
            by.setdefault(shard_of(key.encode()), []).append(key)
        plans[g] = list(by.items())
    return plans.__getitem__


async def contenders(
    stack: AsyncExitStack, prim: LocalPrimaries
) -> tuple[dict[str, Op], stampede.Stampede]:
    st = await stack.enter_async_context(stampede.connect(prim.urls))
    index = {name: i for i, name in enumerate(st.topology.shard_names)}

    def shard_of(key: bytes) -> int:
        return index[st.topology.shard_of(key)]

    addresses = [(n.host, n.port) for n in prim.nodes]
    split, plain = _splitter(shard_of), _splitter(shard_of, plain_keys)
    ceiling = Ceiling(addresses, shard_of)
    await ceiling.open()
    stack.callback(ceiling.close)
    encoded = {g: [k.encode() for k in group_keys(g)] for g in range(GROUPS)}
    encoded_plain = {g: [k.encode() for k in plain_keys(g)] for g in range(GROUPS)}
    encoded_bare = {g: [k.encode() for k in bare_keys(g)] for g in range(GROUPS)}
    raw = [Redis(host=h, port=p) for h, p in addresses]
    stack.push_async_callback(lambda: asyncio.gather(*(c.aclose() for c in raw)))

    async def raw_op(g: int, write: bool) -> Any:
        async def one(s: int, ks: list[str]) -> Any:
            pipe = raw[s].pipeline(transaction=False)
            for k in ks:
                if write:
                    pipe.set(k, VALUE)
                else:
                    pipe.get(k)
            return await pipe.execute()

        return await asyncio.gather(*(one(s, ks) for s, ks in (plain if write else split)(g)))

    async def transaction(g: int) -> Any:
        async with st.transaction() as tx:
            for key in txn_keys(g):
                tx.set(key, VALUE)
        return tx.receipt

    values = {k: VALUE for k in group_keys(0)}
    rows: dict[str, Op] = {
        "ceiling read": lambda g: ceiling.run(encoded[g], write=False),
        "ceiling write": lambda g: ceiling.run(encoded_plain[g], write=True),
        CHECKED: lambda g: ceiling.checked(encoded[g]),
        BARE_GUARD: lambda g: ceiling.guarded(encoded_bare[g]),
        "stampede read": lambda g: st.read(f"bench:{g}", group_keys(g)),
        "stampede write": lambda g: st.write(
            f"bench:{g}", dict(zip(group_keys(g), values.values(), strict=True))
        ),
        TXN_WRITE: lambda g: st.write(f"bench:tx:{g}", dict.fromkeys(txn_keys(g), VALUE)),
        TXN: transaction,
        "redis-py read": lambda g: raw_op(g, write=False),
        "redis-py write": lambda g: raw_op(g, write=True),
    }
    rows.update(await peers(stack, addresses, shard_of))
    for g in range(GROUPS):
        await st.write(f"bench:{g}", dict(zip(group_keys(g), values.values(), strict=True)))
        await st.write(f"bench:tx:{g}", dict.fromkeys(txn_keys(g), VALUE))
    # the transaction's scripts loaded before its row (as the writes' guard is, above):
    # else its first slice opens with 64 EVALSHAs answered NOSCRIPT at once, each then
    # an EVAL of the whole script on a connection opened for it
    await transaction(0)
    if not all([await ceiling.checked(encoded[g]) for g in range(GROUPS)]):  # its stamps seen
        raise RuntimeError("the ceiling's checked read found a group not whole")
    return rows, st


def _kind(name: str) -> str:
    return "read" if name.endswith(" read") else "write"


def report(results: dict[str, dict[str, float]]) -> None:
    top = {kind: results[f"ceiling {kind}"]["keys_per_s"] for kind in ("read", "write")}
    heads = ("keys/s", "% ceil", "p50 µs", "p99 µs", "c=1 µs", "c=1 p50", "CPU µs/op")
    print("\n" + " " * 26 + "".join(f"{h:>10}" for h in heads))
    for name, row in results.items():
        share = row["keys_per_s"] / top[_kind(name)] * 100
        print(
            f"{name:26}{row['keys_per_s']:10.0f}{share:9.1f}%{row['p50_us']:10.0f}"
            f"{row['p99_us']:10.0f}{row['c1_us']:10.0f}{row['c1_p50_us']:10.0f}"
            f"{row['cpu_us_per_op']:10.1f}"
        )


@dataclass(frozen=True)
class Target:
    """One performance target (docs/performance.md): `row[measure]` over
    `base[measure]` (or the server-cost phase's ratio), against `bound`."""

    what: str
    bound: float
    higher: bool  # met when the figure is >= bound (else <= bound)
    row: str = ""
    base: str = ""
    measure: str = ""
    share: bool = False  # printed as a percentage

    def figure(self, results: dict[str, dict[str, float]], cost: Cost | None) -> float | None:
        if not self.row:
            return server_cost.guard_ratio(cost) if cost else None
        if self.row not in results or self.base not in results:
            return None
        base = results[self.base][self.measure]
        return results[self.row][self.measure] / base if base else None

    def shown(self, value: float, bound: bool = False) -> str:
        if bound:
            return f"{value * 100:g}%" if self.share else f"{value:g}x"
        return f"{value:.1%}" if self.share else f"{value:.2f}x"

    def verdict(self, results: dict[str, dict[str, float]], cost: Cost | None) -> dict[str, Any]:
        value = self.figure(results, cost)
        met = None if value is None else value >= self.bound if self.higher else value <= self.bound
        bound = f"{'>=' if self.higher else '<='} {self.shown(self.bound, True)}"
        return {"target": self.what, "figure": value, "bound": bound, "met": met}


TARGETS = (
    Target("stamped read @64, share of the ceiling", 0.35, True,
           "stampede read", "ceiling read", "keys_per_s", share=True),
    Target("guarded write @64, share of the ceiling", 0.20, True,
           "stampede write", "ceiling write", "keys_per_s", share=True),
    Target("server CPU per guarded key (commandstats), vs MSET", 6.0, False),
    Target("read at concurrency 1 (mean), vs the ceiling", 1.5, False,
           "stampede read", "ceiling read", "c1_us"),
    Target("write at concurrency 1 (mean), vs the ceiling", 1.5, False,
           "stampede write", "ceiling write", "c1_us"),
    Target("transaction p50 @1, vs a group write, same keys", 2.0, False,
           TXN, TXN_WRITE, "c1_p50_us"),
    Target("transaction p50 @64, vs a group write, same keys", 2.0, False,
           TXN, TXN_WRITE, "p50_us"),
)  # fmt: skip
"""The performance targets this benchmark measures (docs/performance.md); the last
one is measured at both concurrencies."""


def targets(results: dict[str, dict[str, float]], cost: Cost | None) -> list[dict[str, Any]]:
    """Each target's figure in this run (None: its rows were not run) and whether it is met."""
    return [target.verdict(results, cost) for target in TARGETS]


GAPS = tuple(
    row
    for kind, bare, alone in (
        ("read", CHECKED, "the stamps checked alone"),
        ("write", BARE_GUARD, "the guard script alone"),
    )
    for what in [bare.removeprefix("ceiling ")]
    for row in (
        (f"{alone}: bare {what} @64, share of the ceiling",
         bare, f"ceiling {kind}", "keys_per_s", True),
        (f"stampede {kind} @64, share of the bare {what}",
         f"stampede {kind}", bare, "keys_per_s", True),
        (f"{alone}: bare {what} at c=1, vs the ceiling",
         bare, f"ceiling {kind}", "c1_us", False),
        (f"stampede {kind} at c=1, vs the bare {what}",
         f"stampede {kind}", bare, "c1_us", False),
    )
)  # fmt: skip
"""Where the targets' gap lies: for reads, the part checking the stamps costs (the
ceiling client checking them) and the part stampede's client adds on top; for writes,
the part the guard script costs the servers (the ceiling client running it) and the
part stampede's client adds on top."""


def gaps(results: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Each of `GAPS` in this run (None: its rows were not run)."""
    out = []
    for what, row, base, measure, share in GAPS:
        value = None
        if row in results and base in results and results[base][measure]:
            value = results[row][measure] / results[base][measure]
        out.append({"what": what, "figure": value, "share": share})
    return out


def report_gaps(results: dict[str, dict[str, float]]) -> None:
    print("\nwhere the gap lies (this run):")
    for gap in gaps(results):
        value = gap["figure"]
        shown = "-" if value is None else f"{value:.1%}" if gap["share"] else f"{value:.2f}x"
        print(f"  {gap['what']:68}{shown:>10}")


def report_targets(results: dict[str, dict[str, float]], cost: Cost | None) -> None:
    """The targets table: target, this run's figure, the bound, met or not."""
    print(f"\ntargets (this run):\n  {'target':52}{'this run':>10}{'bound':>10}  verdict")
    for target, row in zip(TARGETS, targets(results, cost), strict=True):
        value, met = row["figure"], row["met"]
        shown = "-" if value is None else target.shown(value)
        verdict = "not measured" if met is None else "met" if met else "NOT MET"
        print(f"  {target.what:52}{shown:>10}{row['bound']:>10}  {verdict}")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in ("redis", "hiredis", "valkey-glide", "coredis", "stampede-redis"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


async def profile(seconds: float, row: str) -> None:
    with LocalPrimaries(3) as prim:
        async with AsyncExitStack() as stack:
            rows, _ = await contenders(stack, prim)
            prof = cProfile.Profile()
            lat: list[float] = []
            prof.enable()
            n, _ = await run_for(rows[row], IN_FLIGHT, seconds, lat)
            prof.disable()
            print(f"{row} under the profiler: {n / seconds:.0f} operations/s")
            order, lines = os.environ.get("SORT", "tottime"), int(os.environ.get("LINES", "25"))
            pstats.Stats(prof).sort_stats(order).print_stats(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with LocalPrimaries(3) as prim:
        async with AsyncExitStack() as stack:
            rows, st = await contenders(stack, prim)
            if args.only:
                wanted = [w.strip() for w in args.only.split(",")]
                rows = {
                    name: op
                    for name, op in rows.items()
                    if name.startswith("ceiling") or any(name.startswith(w) for w in wanted)
                }
            results = await measure(rows, args.seconds, args.slices)
            cost = None
            if args.cost_groups > 0:  # last: each of its rows starts with FLUSHALL
                cost = await server_cost.measure(prim, st, args.cost_groups, args.cost_rounds)
    report(results)
    if cost is not None:
        print()
        server_cost.report(cost, args.cost_groups, args.cost_rounds)
    report_targets(results, cost)
    report_gaps(results)
    return {
        "versions": versions(),
        "seconds": args.seconds,
        "slices": args.slices,
        "rows": results,
        "server_cost": {
            name: {"commandstats_us_per_key": top, "server_cpu_us_per_key": cpu}
            for name, (top, cpu) in (cost or {}).items()
        },
        "targets": targets(results, cost),
        "gaps": gaps(results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--slices", type=int, default=3)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="stampede read",
        metavar="ROW",
        help="profile one row (default: stampede read) instead of measuring",
    )
    parser.add_argument(
        "--only", help="comma-separated row prefixes to run besides the ceiling, e.g. stampede"
    )
    parser.add_argument(
        "--cost-groups",
        type=int,
        default=2000,
        help="groups the server-cost phase writes (benchmarks.server_cost); 0 skips it",
    )
    parser.add_argument("--cost-rounds", type=int, default=3)
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop every row runs on (uvloop: pip install uvloop)",
    )
    args = parser.parse_args()
    factory = asyncio.new_event_loop
    if args.loop == "uvloop":
        import uvloop  # (optional: only this option needs it)

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        if args.profile:
            runner.run(profile(args.seconds * 3, args.profile))
            return
        data = runner.run(main_async(args))
    data["versions"]["loop"] = args.loop
    print(json.dumps(data["versions"]))
    if args.json_path:
        with open(args.json_path, "w") as out:
            json.dump(data, out, indent=2)


if __name__ == "__main__":
    main()
