"""The workload every scenario runs: groups spread over every shard, writers, readers.

- Groups `chaos:c<i>` are written in commit mode, `chaos:s<i>` in stamp mode; each
  has one key per shard (three keys on three shards), so every write of a group
  is a cross-shard write and one lost shard never takes a whole group.
- Writers pick a group at random and write every key with payloads naming the
  write (`<writer>:<seq>:<key>`). A writer that crashes (an injected crash, raised
  or cancelled) ends; a supervisor starts its next incarnation (`w1.0`, `w1.1`, ...),
  as a process manager restarts a dead process.
- Readers pick a group at random and read it with a short retry policy and a
  repair strategy (`CHAOS_REPAIR`, or `Enqueue` for the worker scenario).
- `settle` ends a run: every group is read with `CHAOS_REPAIR` until it reads
  whole, then once more without repair (`final=True`): the end state the checker
  judges.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

from stampede._client import Stampede
from stampede.errors import StampedeError
from stampede.options import ConnectOptions, Options, RetryPolicy
from stampede.typing import RepairStrategy, Topology
from stampede.verdict import Mode
from stampede.versions import HybridClock
from stampede.wire import commit_key, version_key

from .faults import Crash, CrashPoint, FaultyTopology, InjectedCrash
from .history import History, payload_of
from .recording import CHAOS_REPAIR, RecordingStampede

__all__ = [
    "CHAOS_CONNECTION",
    "Layout",
    "Workload",
    "WorkloadConfig",
    "make_layout",
    "plant_torn",
    "settle",
]

CHAOS_GRACE = 0.1
"""Kept versions answer reads of groups torn less than this long ago: short in the
chaos runs, so crashed writes reach the repair strategies within a short run too."""

CHAOS_CONNECTION = ConnectOptions(
    socket_timeout=0.5, connect_timeout=0.5, connection_retries=1, retry_cap=0.1
)
"""Short timeouts: a paused primary fails calls after half a second."""

READ_RETRY = RetryPolicy(attempts=6, base_delay=0.002, max_delay=0.02, deadline=0.3)
SETTLE_RETRY = RetryPolicy(attempts=10, base_delay=0.005, max_delay=0.05, deadline=1.0)
FINAL_RETRY = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class Layout:
    """The groups of a run: their keys, their modes, and which go cold (see `Workload`)."""

    groups: dict[str, list[str]]
    modes: dict[str, Mode]
    cold: frozenset[str] = frozenset()

    def keys_on(self, topology: Topology, shard: str) -> list[bytes]:
        """Every key of the workload (data, records, counters) that `shard` holds now."""
        every = [
            key
            for group, keys in self.groups.items()
            for key in [
                *(k.encode() for k in keys),
                commit_key(group.encode()),
                version_key(group.encode()),
            ]
        ]
        return [key for key in every if topology.shard_of(key) == shard]

    def tagged(self) -> list[str]:
        """The co-located groups (one hash tag: one slot, atomic writes)."""
        return [g for g in self.groups if "{" in g]


def make_layout(topology: Topology, groups: int, *, prefix: str = "chaos") -> Layout:
    """`groups` groups in four kinds, in turn: spread commit, spread stamp, tagged commit,
    tagged stamp. A spread group has a key on every shard (up to three); a tagged one
    (`chaos:{c0}`) has three keys in one slot. Groups 4-7 of every 8 are the cold ones.
    """
    shards = len(topology.shard_names)
    plan: dict[str, list[str]] = {}
    modes: dict[str, Mode] = {}
    cold: set[str] = set()
    for i in range(groups):
        mode = Mode.COMMIT if i % 2 == 0 else Mode.STAMP
        letter = "c" if mode is Mode.COMMIT else "s"
        tagged = i % 4 >= 2
        name = f"{prefix}:{{{letter}{i // 4}}}" if tagged else f"{prefix}:{letter}{i // 4}"
        plan[name] = [f"{name}:k{j}" for j in range(3)] if tagged else _spread(topology, name)
        modes[name] = mode
        if i % 8 >= 4:
            cold.add(name)
    assert all(len(keys) == min(shards, 3) or "{" in g for g, keys in plan.items())
    return Layout(plan, modes, frozenset(cold))


def _spread(topology: Topology, name: str) -> list[str]:
    """Keys `<name>:k<j>` on as many different shards as there are (up to three)."""
    keys: list[str] = []
    used: set[str] = set()
    want = min(len(topology.shard_names), 3)
    for j in range(1000):
        key = f"{name}:k{j}"
        shard = topology.shard_of(key.encode())
        if shard not in used:
            used.add(shard)
            keys.append(key)
        if len(keys) == want:
            break
    return keys


@dataclass
class WorkloadConfig:
    """How many writers and readers, and how they read."""

    writers: int = 4
    readers: int = 3
    retry: RetryPolicy = READ_RETRY
    repair: RepairStrategy | None = CHAOS_REPAIR
    clock_offsets_ms: Sequence[int] = ()  # one per writer (clock skew); default all 0
    cold_after: float | None = None  # seconds; then writers leave the layout's cold groups
    seed: int = 7
    version_grace: float = 0.1  # see CHAOS_GRACE


@dataclass
class Workload:
    """Writers and readers over one shared `FaultyTopology`, recorded in `history`."""

    topology: FaultyTopology
    layout: Layout
    history: History
    config: WorkloadConfig = field(default_factory=WorkloadConfig)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    incarnations: int = 0
    started: float = 0.0
    errors: list[BaseException] = field(default_factory=list)

    def _stampede(self, offset_ms: int = 0) -> Stampede:
        clock = HybridClock(offset_ms=offset_ms)
        options = Options(
            versions=clock, retry=self.config.retry, version_grace=self.config.version_grace
        )
        return Stampede(self.topology, options=options)

    async def run(self, duration: float, fault: Awaitable[object] | None = None) -> None:
        """Run writers and readers for `duration` seconds, and `fault` alongside them.

        The workload keeps running until the fault is over, if it takes longer.
        """
        self.started = time.monotonic()
        tasks = [asyncio.create_task(self._writer(w)) for w in range(self.config.writers)]
        tasks += [asyncio.create_task(self._reader(r)) for r in range(self.config.readers)]
        injected = None if fault is None else asyncio.ensure_future(fault)
        try:
            await asyncio.sleep(duration)
            if injected is not None:
                await injected
        finally:
            if injected is not None and not injected.done():
                injected.cancel()
                await asyncio.gather(injected, return_exceptions=True)
            self.stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            self.errors += [r for r in results if isinstance(r, BaseException)]
        if self.errors:
            raise self.errors[0]

    async def _writer(self, w: int) -> None:
        offsets = list(self.config.clock_offsets_ms)
        st = self._stampede(offsets[w] if w < len(offsets) else 0)
        rng = random.Random(self.config.seed * 1000 + w)
        incarnation = 0
        while not self.stop.is_set():
            process = f"w{w}.{incarnation}"
            task = asyncio.create_task(self._incarnation(st, process, rng))
            await asyncio.wait([task])
            incarnation += 1
            self.incarnations += 1
            if not task.cancelled():
                exc = task.exception()
                if exc is not None and not isinstance(exc, InjectedCrash):
                    raise exc

    def _writable(self) -> list[str]:
        """The groups writers pick from now: all, or the hot ones once `cold_after` passed."""
        after = self.config.cold_after
        names = list(self.layout.groups)
        if after is None or time.monotonic() - self.started < after:
            return names
        return [g for g in names if g not in self.layout.cold]

    async def _incarnation(self, st: Stampede, process: str, rng: random.Random) -> None:
        """One life of a writer: writes until the workload stops or the writer crashes."""
        rst = RecordingStampede(st, self.history, process=process)
        seq = 0
        while not self.stop.is_set():
            group = rng.choice(self._writable())
            seq += 1
            keys = self.layout.groups[group]
            values = {k: payload_of(process, seq, k) for k in keys}
            try:
                await rst.write(group, values, mode=self.layout.modes[group])
            except StampedeError:
                await asyncio.sleep(0.01)  # a shard is down or slow: recorded, carry on

    async def _reader(self, r: int) -> None:
        rst = RecordingStampede(self._stampede(), self.history, process=f"r{r}")
        rng = random.Random(self.config.seed * 1000 + 500 + r)
        names = list(self.layout.groups)
        while not self.stop.is_set():
            group = rng.choice(names)
            try:
                await rst.read(
                    group,
                    self.layout.groups[group],
                    mode=self.layout.modes[group],
                    retry=self.config.retry,
                    repair=self.config.repair,
                )
            except StampedeError:
                await asyncio.sleep(0.01)


async def settle(
    topology: Topology,
    layout: Layout,
    history: History,
    *,
    repair: RepairStrategy = CHAOS_REPAIR,
    attempts: int = 20,
) -> list[str]:
    """Repair every group, then read each once more (`final`); returns groups still torn.

    It starts once the writers' kept versions have expired (`CHAOS_GRACE`): until
    then a group a write tore reads as its last whole write and is not repaired.
    """
    await asyncio.sleep(CHAOS_GRACE)
    st = Stampede(topology, options=Options(retry=SETTLE_RETRY, version_grace=CHAOS_GRACE))
    rst = RecordingStampede(st, history, process="settle")
    for group, keys in layout.groups.items():
        mode = layout.modes[group]
        for _ in range(attempts):
            try:
                result = await rst.read(group, keys, mode=mode, retry=SETTLE_RETRY, repair=repair)
            except StampedeError:
                await asyncio.sleep(0.1)
                continue
            if result.consistent:
                break
    torn: list[str] = []
    for group, keys in layout.groups.items():
        try:
            result = await rst.read(
                group, keys, mode=layout.modes[group], retry=FINAL_RETRY, final=True
            )
        except StampedeError:
            torn.append(group)
            continue
        if not result.consistent:
            torn.append(group)
    return torn


async def plant_torn(
    topology: FaultyTopology,
    layout: Layout,
    history: History,
    groups: Sequence[str],
    *,
    record: bool = False,
) -> int:
    """One write per group that dies between shards (a crashed writer); returns how many.

    With `record`, commit-mode groups' writes die before the commit record instead.
    """
    planter = Stampede(topology, options=Options(version_grace=CHAOS_GRACE))
    st = RecordingStampede(planter, history, process="planter")
    planted = 0
    for seq, group in enumerate(groups):
        late = record and layout.modes[group] is Mode.COMMIT
        point = CrashPoint.BEFORE_COMMIT_RECORD if late else CrashPoint.BETWEEN_SHARDS
        topology.arm(Crash(point), group=group)
        keys = layout.groups[group]
        values = {k: payload_of("planter", seq, k) for k in keys}
        try:
            await st.write(group, values, mode=layout.modes[group])
        except InjectedCrash:
            planted += 1
    return planted
