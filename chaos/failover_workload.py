"""The failover workload: group writers (plain and durable), group readers, read-atomic
transactions and `read_atomic` readers, all recorded in one `History`.

- Plain groups (`fo:...`, `make_layout`: spread over every shard, and tagged) are
  written without `Durability`: a kill may take their last acknowledged writes.
- Durable groups (`fd:...`) are written only with `Durability(replicas=1)`; a write
  whose receipt says `durable` must survive any failover. After each such write a
  `durable` event (op `durable:<write id>`) records `receipt.durable` and
  `receipt.replicas`; the group checker ignores it, `failover_checker` reads it.
- Transactions (`RampSession`, keys `ramp:<n>`) and `read_atomic` readers
  (`read_once`) record `txn` and `rread` operations, as in the `ramp` scenario. One
  transaction writer asks `Durability(replicas=1)`: its `ok` completions carry the
  receipt's `durable`, and a transaction acknowledged durable must survive any
  failover (`failover_checker`).

Every operation's outcome is recorded (ok, fail, unknown, with the error's type) and
each client carries on after an error, as an application would. `TrackingTopology`
tells `RecordingStampede` which keys each write handed to the servers, so a write that
raised is `unknown` with what it sent, and passes `Durability` on unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
import traceback
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Unpack

from stampede._client import Stampede
from stampede.errors import StampedeError
from stampede.options import Durability, Options
from stampede.testing.faults import DelegatingTopology
from stampede.topology._base import WriteOutcome
from stampede.typing import GuardStamp, Topology
from stampede.wire import commit_key

from .history import CURRENT_OP, History, payload_of, text
from .ramp_workload import KEYS, RampSession, key_name, pick_keys, read_once
from .recording import CHAOS_REPAIR, RecordingStampede
from .workload import CHAOS_GRACE, READ_RETRY, Layout, make_layout

__all__ = [
    "DURABLE",
    "Ack",
    "FailoverWorkload",
    "TrackingTopology",
    "failover_layout",
    "ramp_keys_on",
]

DURABLE = Durability(replicas=1, timeout=1.0)
"""What the durable writers ask: one replica has every key (and record) of the write.
The wait is longer than the socket timeout (`FAILOVER_CONNECTION`, 0.5 s) on purpose:
`WAIT` extends the socket timeout, so a shortfall is reported (`receipt.durable` is
False), never raised as a `WriteTimeout` (see tests/integration/test_chaos_failover.py)."""


class TrackingTopology(DelegatingTopology):
    """Delegates every call; records the keys (and stamp) a recorded write hands over."""

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        ctx = CURRENT_OP.get()
        if ctx is not None and ctx.f in ("write", "delete"):
            ctx.version, ctx.token = stamp["version"], stamp["token"]
            ctx.sent.update(keys)
        return await self.inner.write_guarded(keys, values, **stamp)


def failover_layout(topology: Topology, groups: int) -> tuple[Layout, Layout]:
    """The plain groups (`fo:`) and the durable ones (`fd:`, half as many)."""
    return make_layout(topology, groups, prefix="fo"), make_layout(
        topology, max(4, groups // 2), prefix="fd"
    )


def ramp_keys_on(topology: Topology, shard: str) -> list[bytes]:
    """The transaction keys `shard` holds now."""
    return [key_name(k) for k in range(KEYS) if topology.shard_of(key_name(k)) == shard]


@dataclass(frozen=True, slots=True)
class Ack:
    """A group write acknowledged: when it was invoked, the keys (and record) it wrote."""

    t0: float
    keys: frozenset[str]


@dataclass
class FailoverWorkload:
    """Writers and readers of every kind over one topology, until `stop` is set."""

    topology: Topology
    plain: Layout
    durable: Layout
    history: History
    writers: int = 3
    durable_writers: int = 2
    readers: int = 3
    txn_writers: int = 2
    durable_txn_writers: int = 1
    atomic_readers: int = 2
    seed: int = 11
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acked: list[Ack] = field(default_factory=list)
    leaked: collections.Counter[str] = field(default_factory=collections.Counter)
    traces: dict[str, str] = field(default_factory=dict)  # the first of each leaked type

    def stampede(self, durability: Durability | None = None) -> Stampede:
        options = Options(retry=READ_RETRY, version_grace=CHAOS_GRACE, durability=durability)
        return Stampede(self.topology, options=options)

    async def run(self) -> None:
        """Run every client until `stop` is set; re-raise what none of them expected."""
        tasks = [
            *(self._writer(f"w{i}", self.plain, None) for i in range(self.writers)),
            *(self._writer(f"d{i}", self.durable, DURABLE) for i in range(self.durable_writers)),
            *(self._reader(i) for i in range(self.readers)),
            *(self._transactions(i + 1) for i in range(self.txn_writers)),
            *(
                self._transactions(self.txn_writers + 1 + i, DURABLE)
                for i in range(self.durable_txn_writers)
            ),
            *(self._atomic_reader(1001 + i) for i in range(self.atomic_readers)),
        ]
        await asyncio.gather(*tasks)

    def acked_since(self, t: float, keys: Collection[str] | None = None) -> int:
        """Group writes invoked at or after `t` (monotonic) and acknowledged; with `keys`,
        only those that touched one of them."""
        wanted = None if keys is None else frozenset(keys)
        return sum(
            1 for a in self.acked if a.t0 >= t and (wanted is None or not wanted.isdisjoint(a.keys))
        )

    def _unexpected(self, exc: Exception) -> None:
        """Errors that are not `StampedeError`s are counted (they are still recorded)."""
        if not isinstance(exc, StampedeError):
            self.leaked[type(exc).__name__] += 1
            self.traces.setdefault(type(exc).__name__, "".join(traceback.format_exception(exc)))

    async def _writer(self, process: str, layout: Layout, durability: Durability | None) -> None:
        rst = RecordingStampede(self.stampede(durability), self.history, process=process)
        rng = random.Random(f"{self.seed}:{process}")
        names = list(layout.groups)
        seq = 0
        while not self.stop.is_set():
            group = rng.choice(names)
            seq += 1
            keys = layout.groups[group]
            values = {k: payload_of(process, seq, k) for k in keys}
            t0 = time.monotonic()
            try:
                receipt = await rst.write(group, values, mode=layout.modes[group])
            except Exception as exc:  # recorded by RecordingStampede; carry on
                self._unexpected(exc)
                await asyncio.sleep(0.01)
                continue
            self.acked.append(Ack(t0, frozenset([*keys, text(commit_key(group.encode()))])))
            if durability is not None:
                self.history.record(
                    "durable",
                    f"durable:{process}:{seq}",
                    write=f"{process}:{seq}",
                    durable=receipt.durable,
                    replicas=dict(receipt.replicas),
                )

    async def _reader(self, r: int) -> None:
        plain = RecordingStampede(self.stampede(), self.history, process=f"r{r}")
        rng = random.Random(f"{self.seed}:r{r}")
        every = {**self.plain.groups, **self.durable.groups}
        modes = {**self.plain.modes, **self.durable.modes}
        names = list(every)
        while not self.stop.is_set():
            group = rng.choice(names)
            try:
                await plain.read(
                    group, every[group], mode=modes[group], retry=READ_RETRY, repair=CHAOS_REPAIR
                )
            except Exception as exc:
                self._unexpected(exc)
                await asyncio.sleep(0.01)

    async def _transactions(self, session: int, durability: Durability | None = None) -> None:
        writer = RampSession(self.stampede(durability), self.history, session, f"t{session}")
        rng = random.Random(f"{self.seed}:t{session}")
        while not self.stop.is_set():
            if await writer.transact(pick_keys(rng)) != "ok":
                await asyncio.sleep(0.01)

    async def _atomic_reader(self, session: int) -> None:
        st = self.stampede()
        rng = random.Random(f"{self.seed}:a{session}")
        txn = 0
        while not self.stop.is_set():
            txn += 1
            if not await read_once(st, self.history, session, txn, pick_keys(rng)):
                await asyncio.sleep(0.01)

    async def final_atomic_reads(self) -> None:
        """Read every transaction key once more, eight at a time (`final`)."""
        st = self.stampede()
        for first in range(0, KEYS, 8):
            keys = list(range(first, min(first + 8, KEYS)))
            for attempt in range(10):
                if await read_once(st, self.history, 2000, attempt, keys, final=True):
                    break
                await asyncio.sleep(0.05)
