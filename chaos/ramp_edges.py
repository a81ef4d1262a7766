"""The read-atomic edge scenarios: transactions at their edges, judged by `check_edges`.

| scenario           | what runs                                                       |
| ------------------ | --------------------------------------------------------------- |
| `ramp-delete`      | transactions that `tx.delete` keys (1 in 5) and write with a    |
|                    | 0.05-0.5 s `ttl` (1 in 4); three writers cancelled at every     |
|                    | step, a fourth held 0.3 s before its first COMMIT call (every   |
|                    | other transaction); one-key `st.delete`s; 0.2 s tombstone and   |
|                    | version grace; the sweep every 0.25 s; on a cluster, three      |
|                    | slots migrating key by key (a key and its version hash apart)   |
| `ramp-lost-commit` | three writers lose the COMMIT calls of every other transaction  |
|                    | (`LOSS_MODES`: before or after running, mixed, one shard, once; |
|                    | a 0.3 s transaction timeout), three more write undisturbed; 1   |
|                    | in 5 transactions has one key (one-slot COMMIT_ONE)             |
| `ramp-repair`      | transactions writing whole groups of 3 keys, cancelled (and     |
|                    | writer processes SIGKILLed) at every COMMIT step; group reads   |
|                    | repairing with `NewestWins` beside `read_atomic`                |
| `ramp-evict`       | `ramp-delete`'s workload under a 4 MB `maxmemory` headroom, a   |
|                    | filler of 64 KB keys, `allkeys-lru` then `volatile-lru`         |

The faults are aimed where the contract is thin: the keys of a transaction cut
mid-commit rest for a second (no writer touches them) while the deleters aim at
them and readers read them together; keys whose commit failed on one shard are
written no more, so the final read shows whether readers and the sweep completed
them. Each scenario runs for `2 x duration` seconds (5 s with the default timing)
on 100 keys (60 in 20 groups for `ramp-repair`) and ends with a sweep, a
`read_atomic` of every key (`final`) and raw GETs of every key; the scenarios without
deletes also write the text export (`ramp_checker`) beside the history.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import random
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence

from stampede._client import Stampede
from stampede.options import Options
from stampede.repair import NewestWins
from stampede.wire._txn import side_key

from .env import Run
from .faults import migrate_slot
from .history import load_events
from .ramp_edge_checker import (
    DELETE_RULES,
    EVICT_RULES,
    LOST_COMMIT_RULES,
    REPAIR_RULES,
    check_edges,
)
from .ramp_edge_workload import (
    LOSS_MODES,
    EdgeMix,
    EdgeTopology,
    WriterKit,
    edge_writer,
    final_reads,
    group_deleter,
    group_layout,
    group_read_once,
    group_reader,
    pick_groups,
    sweep_once,
    sweeper,
)
from .ramp_memory import Squeeze, filler
from .ramp_scenario import _process_lane, write_export
from .ramp_workload import KEYS, STEPS, RampSession, Step, key_name, read_loop, seed
from .workload import CHAOS_CONNECTION

__all__ = [
    "EDGE_CHECKERS",
    "ramp_delete",
    "ramp_evict",
    "ramp_lost_commit",
    "ramp_repair",
]

EDGE_GRACE = 0.2
"""Seconds of `tombstone_grace` and `version_grace`: tombstones and kept versions expire
during the run."""
DELETE_MIX = EdgeMix(delete_share=0.2, ttl_share=0.25)
LOSS_MIX = EdgeMix(one_key_share=0.2)
COMMIT_STEPS = tuple(s for s in STEPS if s.phase == "commit")
WRITERS, READERS, DELETERS = 3, 4, 2
DELETE_EVERY = 0.05  # seconds between one deleter's st.delete calls, on average
REST = 1.0  # seconds the keys of a transaction cut mid-commit are left to the deleters
EDGE_CHECKERS = {
    "ramp-delete": functools.partial(check_edges, rules=DELETE_RULES),
    "ramp-lost-commit": functools.partial(check_edges, rules=LOST_COMMIT_RULES),
    "ramp-repair": functools.partial(check_edges, rules=REPAIR_RULES),
    "ramp-evict": functools.partial(check_edges, rules=EVICT_RULES),
}


def _seed_of(run: Run) -> int:
    return zlib.crc32(str(run.history.path or run.env.kind).encode())


def _rotated(steps: Sequence[Step], offset: int) -> Iterator[Step]:
    k = offset % len(steps)
    return itertools.cycle([*steps[k:], *steps[:k]])


async def _start(run: Run, options: Options, groups: Sequence[Sequence[int]] = ()) -> tuple[
    Stampede, Stampede, float]:  # fmt: skip
    """The plain and the fault-injecting clients, every key (or group) written once by
    session 0, and when the workload ends."""
    real = run.topology
    if {real.shard_of(key_name(k)) for k in range(KEYS)} != set(real.shard_names):
        raise RuntimeError("the ramp keys do not cover every shard")
    st = Stampede(real, options=options)
    faulty = Stampede(EdgeTopology(real.inner), options=options)
    if groups:
        session = RampSession(st, run.history, 0, "seed")
        for keys in groups:
            await session.transact(keys)
    else:
        await seed(st, run.history)
    return st, faulty, time.monotonic() + run.timing.duration * 2


async def _finish(run: Run, st: Stampede, keys: Sequence[int], *, sweep: bool = True) -> None:
    """Let the last tombstones and TTLs run out, sweep, then the final reads."""
    await asyncio.sleep(EDGE_GRACE + 0.1)
    if sweep:
        await sweep_once(run, EDGE_GRACE)
    await final_reads(st, run.history, keys)


def _note(run: Run, kit: WriterKit, *extra: str) -> None:
    t = kit.tally
    parts = [f"txns acknowledged {t['ok']}, cancelled {t['cancelled']}, outcome unknown "
             f"{t['unknown']}, aborted {t['fail']}"]  # fmt: skip
    run.notes.append("; ".join([*parts, *extra]))


def _export(run: Run) -> None:
    if run.history.path is not None:
        out = write_export(run.history.path, run.history.events)
        run.notes.append(f"text history: {out}")


async def _migrations(run: Run, rng: random.Random, until: float) -> None:
    """On a cluster, three slots of workload keys move while deletes and transactions
    run, key by key: a key and its version hash one step apart (the data key first,
    then the other way round), so writes, deletes and commits meet a slot split
    between two masters (ASK, TRYAGAIN), and a write's floor must reach a hash on the
    other node."""
    cluster = run.env.cluster
    if cluster is None:
        return
    span = until - time.monotonic()
    moved = []
    for turn, at in enumerate((0.1, 0.4, 0.7)):
        await asyncio.sleep(max(0.0, until - span * (1 - at) - time.monotonic()))
        data = key_name(rng.randrange(KEYS))
        slot = run.topology.slot_of(data)
        source = cluster.master_for_slot(slot)
        target = next(m for m in cluster.masters if m is not source)
        pair = [data, side_key(data, run.topology.slot_of)]
        seconds = await migrate_slot(
            cluster, run.history, slot=slot, target=target,
            keys=pair if turn % 2 == 0 else pair[::-1], step=span / 30,
        )  # fmt: skip
        moved.append(f"{slot} ({data.decode()}, {seconds:.2f} s)")
    run.notes.append(f"slots migrated key by key: {', '.join(moved)}")


async def ramp_delete(
    run: Run, *, beside: Callable[[float], Awaitable[None]] | None = None
) -> None:
    """Deletes and short TTLs in transactions, one-key group deletes, the sweep, on a
    cluster slots migrating key by key (and `beside(until)`, another fault, for
    `ramp-evict`, instead of the migrations)."""
    seed_value = _seed_of(run)
    options = Options(
        connection=CHAOS_CONNECTION, tombstone_grace=EDGE_GRACE, version_grace=EDGE_GRACE
    )
    st, faulty, until = await _start(run, options)
    kit = WriterKit(run, faulty, until, DELETE_MIX, steps=_rotated(STEPS, seed_value), rest=REST)
    plain = WriterKit(run, st, until, DELETE_MIX, tally=kit.tally, cut=kit.cut)
    await asyncio.gather(
        *(edge_writer(kit, 1 + i, random.Random(seed_value + i)) for i in range(WRITERS)),
        edge_writer(kit, 1 + WRITERS, random.Random(seed_value - 1), hold_every=2),
        *(group_deleter(plain, 10 + i, random.Random(seed_value + 10 + i), DELETE_EVERY)
          for i in range(DELETERS)),
        *(read_loop(st, run.history, 1000 + i, random.Random(seed_value * 7 + i), until,
                    kit.pick_read) for i in range(READERS)),
        sweeper(run, until, EDGE_GRACE),
        beside(until) if beside else _migrations(run, random.Random(seed_value * 3), until),
    )  # fmt: skip
    if beside is None and run.env.cluster is not None:
        await asyncio.to_thread(run.env.servers.heal)
    await _finish(run, st, range(KEYS))
    _note(run, kit, f"held {kit.tally['held']}; st.delete {kit.tally['deleted']}")


async def ramp_lost_commit(run: Run) -> None:
    """COMMIT calls lost for half the transactions, in every way `LOSS_MODES` lists."""
    seed_value = _seed_of(run)
    options = Options(
        connection=CHAOS_CONNECTION, version_grace=EDGE_GRACE, transaction_timeout=0.3
    )
    st, faulty, until = await _start(run, options)
    modes = LOSS_MODES[seed_value % len(LOSS_MODES) :] + LOSS_MODES[: seed_value % len(LOSS_MODES)]
    kit = WriterKit(
        run, faulty, until, LOSS_MIX, losses=itertools.cycle(modes), freeze_pending=True
    )
    plain = WriterKit(run, st, until, LOSS_MIX, tally=kit.tally, resting=kit.resting)
    await asyncio.gather(
        *(edge_writer(kit, 1 + i, random.Random(seed_value + i)) for i in range(WRITERS)),
        *(edge_writer(plain, 4 + i, random.Random(seed_value + 4 + i)) for i in range(WRITERS)),
        *(read_loop(st, run.history, 1000 + i, random.Random(seed_value * 7 + i), until)
          for i in range(READERS - 1)),
        sweeper(run, until, EDGE_GRACE),
    )  # fmt: skip
    await _finish(run, st, range(KEYS))
    lost = ", ".join(f"{m} {kit.tally[f'lost-{m}']}" for m in dict.fromkeys(LOSS_MODES)
                     if m != "none")  # fmt: skip
    _note(run, kit, f"commits lost: {lost}; keys left pending, then written no more "
          f"{kit.tally['frozen']}")  # fmt: skip
    _export(run)


async def ramp_repair(run: Run) -> None:
    """Whole-group transactions cut at every COMMIT step (cancelled, SIGKILLed), group
    reads repairing with `NewestWins` and `read_atomic` side by side."""
    seed_value = _seed_of(run)
    groups = group_layout(run.topology)
    options = Options(connection=CHAOS_CONNECTION, version_grace=EDGE_GRACE)
    st, faulty, until = await _start(run, options, groups)
    mix = EdgeMix(groups=groups)
    kit = WriterKit(run, faulty, until, mix, steps=_rotated(COMMIT_STEPS, seed_value))
    readers = WriterKit(run, st, until, mix, tally=kit.tally)
    repair = NewestWins()

    def pick(rng: random.Random) -> list[int]:
        return pick_groups(rng, groups)

    await asyncio.gather(
        *(edge_writer(kit, 1 + i, random.Random(seed_value + i)) for i in range(WRITERS)),
        _process_lane(run, 0, until, itertools.count(100), _rotated(COMMIT_STEPS, seed_value + 1),
                      kit.tally, extra=["--groups"]),
        *(group_reader(readers, 2000 + i, random.Random(seed_value * 5 + i), repair)
          for i in range(READERS // 2)),
        *(read_loop(st, run.history, 1000 + i, random.Random(seed_value * 7 + i), until, pick)
          for i in range(READERS // 2)),
    )  # fmt: skip
    for path in run.extra_histories:
        run.history.extend(load_events(path))
    for gid, keys in enumerate(groups):  # each group once more, repairing
        await group_read_once(st, run.history, 998, gid, keys, repair)
    await _finish(run, st, sorted(k for g in groups for k in g), sweep=False)
    _note(run, kit, f"writer processes SIGKILLed {kit.tally['killed']} (exited on their "
          f"own {kit.tally['exited']})")  # fmt: skip
    _export(run)


async def ramp_evict(run: Run) -> None:
    """`ramp-delete` under memory pressure: `allkeys-lru`, then `volatile-lru`."""
    squeeze = Squeeze(run.topology)
    run.cleanup.append(squeeze.release)
    before = await squeeze.evicted()
    evicted: list[int] = []
    fill: collections.Counter[str] = collections.Counter()

    async def pressure(until: float) -> None:
        await squeeze.apply("allkeys-lru")
        run.history.fault("evict-policy", policy="allkeys-lru", headroom=squeeze.headroom)

        async def turn() -> None:
            await asyncio.sleep(max(0.0, (until - time.monotonic()) / 2))
            evicted.append(await squeeze.evicted() - before)
            await squeeze.policy("volatile-lru")
            run.history.fault("evict-policy", policy="volatile-lru")

        await asyncio.gather(filler(run.topology, until, fill), turn())
        evicted.append(await squeeze.evicted() - before - evicted[0])

    try:
        await ramp_delete(run, beside=pressure)
    finally:
        await squeeze.release()
    allkeys, volatile = [*evicted, 0, 0][:2]
    run.history.fault("evicted", allkeys=allkeys, volatile=volatile)
    run.notes.append(
        f"evicted keys: {allkeys} under allkeys-lru, {volatile} under volatile-lru; the "
        f"filler wrote {fill['filled']} keys of 64 KB ({fill['fill_refused']} refused)"
    )
