"""Race scenarios: replies lost after the server executed, clock skew and poisoned versions.

| scenario     | what races                                                             |
| ------------ | ---------------------------------------------------------------------- |
| `lost-reply` | every client talks to Redis through a `RedisProxy` that forwards one    |
|              | write command (script or EXEC) in six and closes the connection instead |
|              | of relaying its reply; stamped writes, and `update()` deposits whose   |
|              | balance lists the deposits it holds (each must be applied once)        |
| `clock`      | writers' clocks 0, +400, -400 ms apart; one writer a year ahead on     |
|              | groups of its own; a stored version 2**63-1 planted on another         |
|              | program's group; two clients writing one group turn about (the later   |
|              | write must win: no clock-skew window for them)                         |
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from stampede._client import Stampede
from stampede.errors import StampedeError, WriteConflict
from stampede.options import Options
from stampede.topology._shards import Shards
from stampede.versions import HybridClock
from stampede.wire import Envelope, new_token

from .env import Run
from .faults import FaultyTopology
from .history import History, payload_of, text
from .race_checker import parse_balance
from .recording import CHAOS_REPAIR, RecordingStampede
from .workload import CHAOS_CONNECTION, CHAOS_GRACE, READ_RETRY, Layout, Workload, WorkloadConfig

__all__ = ["DROP_ONE_IN", "clock", "deposit", "lost_reply"]

DROP_ONE_IN = 6
WRITE_COMMANDS = frozenset({b"EVALSHA", b"EVAL", b"EVALSHA_RO", b"FCALL", b"EXEC"})
YEAR_MS = 365 * 24 * 3600 * 1000
SKEW_MS = (0, 400, -400, 0)


# -- lost replies ------------------------------------------------------------------------


async def deposit(
    st: Stampede, history: History, process: str, group: str, key: str, did: str, amount: int
) -> None:
    """One `update()` deposit, recorded as `f: deposit` (ok, fail when nothing was applied
    (`WriteConflict`), else unknown); the balance payload lists the deposits it holds."""

    def add(current: dict[str, bytes | None]) -> dict[str, bytes]:
        parsed = parse_balance(None if current[key] is None else text(current[key] or b""))
        balance, ids = parsed if parsed is not None else (0, [])
        return {key: f"{balance + amount}|{','.join([*ids, did])}".encode()}

    op = history.next_op(process)
    history.record("invoke", op, f="deposit", proc=process, group=group, id=did, amount=amount)
    try:
        await st.update(group, [key], add)
    except BaseException as exc:
        status = "fail" if isinstance(exc, WriteConflict) else "unknown"
        history.record(status, op, f="deposit", error=type(exc).__name__)
        raise
    history.record("ok", op, f="deposit")


async def read_balance(st: Stampede, history: History, group: str, key: str) -> None:
    """The final balance of `group`, recorded as `f: balance` with its payload."""
    op = history.next_op("settle")
    history.record("invoke", op, f="balance", proc="settle", group=group, final=True)
    result = await st.read(group, [key], retry=READ_RETRY)
    value = result.values[key]
    history.record("ok", op, f="balance", payload=None if value is None else text(value))


class _Dropper:
    """Picks one write command in `one_in` (seeded) for the proxy to lose the reply of."""

    def __init__(self, one_in: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.one_in = one_in

    def __call__(self, command: tuple[bytes, ...]) -> bool:
        return command[0].upper() in WRITE_COMMANDS and self.rng.randrange(self.one_in) == 0


async def lost_reply(run: Run) -> None:
    """Writers, readers and depositors through proxies that lose replies (shards only)."""
    from stampede.testing.proxy import RedisProxy

    nodes = run.env.servers.nodes
    proxies = [RedisProxy(node.address) for node in nodes]
    for proxy in proxies:
        await proxy.start()
    topology = FaultyTopology(
        Shards([p.url for p in proxies], options=CHAOS_CONNECTION), history=run.history
    )
    try:
        await topology.open()
        for i, proxy in enumerate(proxies):
            proxy.drop_reply(_Dropper(DROP_ONE_IN, seed=31 + i), times=None)
        banks = [f"chaos:{{b{i}}}" for i in range(4)]
        workload = Workload(topology, run.layout, run.history, WorkloadConfig(seed=19))
        made = [0]

        async def depositor(d: int) -> None:
            options = Options(versions=HybridClock(), version_grace=CHAOS_GRACE)
            st = Stampede(topology, options=options)
            rng = random.Random(700 + d)
            seq = 0
            while not workload.stop.is_set():
                seq += 1
                group = rng.choice(banks)
                with contextlib.suppress(StampedeError):
                    await deposit(
                        st, run.history, f"d{d}", group, f"{group}:balance", f"d{d}.{seq}", seq
                    )
                    made[0] += 1

        tasks = [asyncio.create_task(depositor(d)) for d in range(3)]
        try:
            await workload.run(run.timing.duration)
        finally:
            workload.stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        dropped = sum(rule.hits for p in proxies for rule in p.rules)
        direct = Stampede(run.topology, options=Options(version_grace=CHAOS_GRACE))
        for group in banks:
            await read_balance(direct, run.history, group, f"{group}:balance")
        run.history.fault("lost-reply", count=dropped)
        run.notes.append(
            f"replies lost after the server executed: {dropped}; deposits acknowledged {made[0]}"
        )
    finally:
        with contextlib.suppress(Exception):
            await topology.aclose()
        for proxy in proxies:
            await proxy.aclose()


# -- clocks ------------------------------------------------------------------------------


def _units_per_ms() -> int:
    """Version units per millisecond of a `HybridClock` (its versions' resolution)."""
    version = HybridClock().now()
    return max(1, version // max(1, HybridClock.physical_ms(version)))


async def _plant_poison(run: Run, group: str, keys: Sequence[str]) -> None:
    """Another program's group: written once, then one key overwritten with version 2**63-1."""
    st = Stampede(run.topology, options=Options(version_grace=CHAOS_GRACE))
    await st.write(group, {k: payload_of("other", 1, k) for k in keys})
    poison = Envelope(2**63 - 1, new_token(), b"poison").encode()
    await run.topology.execute(keys[0].encode(), "SET", keys[0], poison)
    run.history.fault("poison", group=group, key=keys[0], version=2**63 - 1)


def _clock_layout(run: Run) -> tuple[Layout, list[str], list[str], list[str]]:
    """Extra groups: poisoned, a year-ahead writer's, and the turn-about (sequential) ones."""
    groups = dict(run.layout.groups)
    modes = dict(run.layout.modes)
    extra: dict[str, list[str]] = {}
    for name in ("chaos:p0", "chaos:{p1}", "chaos:a0", "chaos:{a1}", "chaos:q0", "chaos:{q1}"):
        extra[name] = [f"{name}:k{j}" for j in range(3)]
        modes[name] = modes[next(iter(groups))]
    poisoned = ["chaos:p0", "chaos:{p1}"]
    ahead = ["chaos:a0", "chaos:{a1}"]
    sequential = ["chaos:q0", "chaos:{q1}"]
    return Layout({**groups, **extra}, modes), poisoned, ahead, sequential


@dataclass
class _Clocks:
    """The clock scenario's groups and writers."""

    run: Run
    layout: Layout
    poisoned: list[str]
    ahead: list[str]
    sequential: list[str]
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def stampede_at(self, offset_ms: int) -> Stampede:
        clock_ = HybridClock(offset_ms=offset_ms)
        options = Options(versions=clock_, retry=READ_RETRY, version_grace=CHAOS_GRACE)
        return Stampede(self.run.topology, options=options)

    async def writer(self, w: int) -> None:
        """Writes the normal groups; one op in ten reads, one in ten writes a strange group."""
        layout = self.layout
        rst = RecordingStampede(self.stampede_at(SKEW_MS[w]), self.run.history, process=f"w{w}")
        rng = random.Random(40 + w)
        normal = list(self.run.layout.groups)
        strange = self.poisoned + self.ahead
        seq = 0
        while not self.stop.is_set():
            seq += 1
            roll = rng.random()
            group = rng.choice(normal if roll < 0.8 else strange)
            keys = layout.groups[group]
            with contextlib.suppress(StampedeError):
                if 0.8 <= roll < 0.9:
                    await rst.read(group, keys, mode=layout.modes[group], repair=CHAOS_REPAIR)
                else:
                    values = {k: payload_of(f"w{w}", seq, k) for k in keys}
                    await rst.write(group, values, mode=layout.modes[group])
            await asyncio.sleep(0)

    async def ahead_writer(self) -> None:
        rst = RecordingStampede(self.stampede_at(YEAR_MS), self.run.history, process="ahead")
        seq = 0
        while not self.stop.is_set():
            seq += 1
            group = self.ahead[seq % len(self.ahead)]
            values = {k: payload_of("ahead", seq, k) for k in self.layout.groups[group]}
            with contextlib.suppress(StampedeError):
                await rst.write(group, values, mode=self.layout.modes[group])
            await asyncio.sleep(0.005)

    async def turn_about(self) -> None:
        """Two clients write one group in turn: each write starts after the other's ack."""
        pair = [
            RecordingStampede(self.stampede_at(0), self.run.history, process=f"t{i}")
            for i in (0, 1)
        ]
        seq = 0
        while not self.stop.is_set():
            seq += 1
            group = self.sequential[seq % len(self.sequential)]
            for i, rst in enumerate(pair):
                values = {k: payload_of(f"t{i}", seq, k) for k in self.layout.groups[group]}
                with contextlib.suppress(StampedeError):
                    await rst.write(group, values, mode=self.layout.modes[group])


async def clock(run: Run) -> None:
    """Skewed, year-ahead and turn-about writers; poisoned versions; nobody wedges."""
    layout, poisoned, ahead, sequential = _clock_layout(run)
    for group in poisoned:
        await _plant_poison(run, group, layout.groups[group])
    for group in ahead:
        run.history.fault("poison", group=group, reason="a writer a year ahead")
    per_ms = _units_per_ms()
    spread = max(SKEW_MS) - min(SKEW_MS)
    for group in run.layout.groups:
        run.history.fault("clock-window", group=group, window=(spread + 1) * per_ms)
    for group in sequential:
        run.history.fault("clock-window", group=group, window=0)
    clocks = _Clocks(run, layout, poisoned, ahead, sequential)
    tasks = [asyncio.create_task(clocks.writer(w)) for w in range(len(SKEW_MS))]
    tasks += [asyncio.create_task(clocks.ahead_writer()), asyncio.create_task(clocks.turn_about())]
    readers = Workload(run.topology, layout, run.history, WorkloadConfig(writers=0, seed=23))
    quiet = logging.getLogger("stampede.versions")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # every refused version is logged: thousands of lines
    try:
        await readers.run(run.timing.duration)
    finally:
        clocks.stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        quiet.setLevel(level)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]
    settled = {g: layout.groups[g] for g in [*ahead, *sequential]}
    run.layout.groups.update(settled)
    run.layout.modes.update({g: layout.modes[g] for g in settled})
    run.notes.append(
        f"clock offsets {', '.join(f'{o:+d}' for o in SKEW_MS)} ms and +1 year (groups "
        f"{', '.join(ahead)}); version 2**63-1 planted on {', '.join(poisoned)}"
    )
