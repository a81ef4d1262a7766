"""The `ramp` workload: read-atomic transactions over 100 integer keys, recorded.

A *session* is one writer or reader. A write transaction picks 3-8 of the keys
and writes each a unique integer (`session * 1_000_000 + n`, as decimal text);
its version comes from the session's own `HybridClock`, made unique across
sessions (the low 10 bits are the session), and is recorded in the `invoke`
event *before anything is sent*, so even a transaction whose writer died has its
place in the version order. A read transaction reads 3-8 keys with
`read_atomic`.

`StepTopology` stops a writer at one chosen *step* of a transaction: before or
after the i-th PREPARE call (round 1) or COMMIT call (round 2), recognised by
the scripts' SHA. What happens there is the step's `action`: cancel the writer's
task (in process), or freeze the whole process until the runner SIGKILLs it
(`ramp_writer`).

Events (JSON lines, `History`):

```
{"type": "invoke", "f": "txn", "op": ..., "session": 3, "txn": 7, "version": V,
 "writes": {"12": 3000021, "40": null (tx.delete), ...}, "ttl": 0.2 (only with a TTL),
 "grace": 0.2 (only with a delete: its tombstones' lifetime)}
{"type": "ok" | "fail" | "unknown", "f": "txn", "op": ..., "pending": [...], "superseded": [...],
 "sent": when it called commit() (its expiry instants are computed then)}
{"type": "invoke", "f": "rread", "op": ..., "session": 1001, "txn": 4, "keys": [..]}
{"type": "ok", "f": "rread", "op": ..., "values": {"12": 3000021 | null}, "rounds": 1}
{"type": "fault", "kind": "crash" | "worker-kill" | "pause" | "migrate", ...}
```
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from stampede._client import Stampede
from stampede._txn.scripts import COMMIT, PREPARE
from stampede.errors import TransactionAborted
from stampede.topology._base import call_units
from stampede.versions import HybridClock

from .faults import FaultyTopology
from .history import History

if TYPE_CHECKING:
    from stampede.topology._node_ops import Script

__all__ = [
    "KEYS",
    "STEPS",
    "RampSession",
    "Step",
    "StepPlan",
    "StepTopology",
    "key_name",
    "read_loop",
    "seed",
]

KEYS = 100
VALUE_BASE = 1_000_000
_SESSION_BITS = 10


def key_name(key: int) -> bytes:
    """The Redis key of integer key `key` (no hash tag: each key its own slot)."""
    return b"ramp:%d" % key


@dataclass(frozen=True, slots=True)
class Step:
    phase: str  # "prepare" (round 1) | "commit" (round 2)
    index: int  # which call of the phase (modulo the transaction's calls)
    when: str  # "before" | "after" the call

    def __str__(self) -> str:
        return f"{self.when}-{self.phase}-{self.index}"


STEPS: tuple[Step, ...] = tuple(
    Step(phase, index, when)
    for phase in ("prepare", "commit")
    for when in ("before", "after")
    for index in range(3)
)
"""Every step of both rounds: before and after each of the first three calls of each."""


@dataclass
class StepPlan:
    """Stop the transaction of this context at `step` by running `action` there."""

    step: Step
    action: Callable[[Step], Awaitable[None]]
    calls: dict[str, int] = field(default_factory=lambda: {"prepare": 0, "commit": 0})
    fired: bool = False


CURRENT_STEP: contextvars.ContextVar[StepPlan | None] = contextvars.ContextVar(
    "stampede_ramp_step", default=None
)


class StepTopology(FaultyTopology):
    """A topology that runs a step plan's action at its step (only public calls)."""

    _PHASES: ClassVar[dict[str, str]] = {PREPARE.sha: "prepare", COMMIT.sha: "commit"}

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        plan = CURRENT_STEP.get()
        phase = self._PHASES.get(script.sha)
        if plan is None or phase is None or plan.fired:
            return await self.inner.script(script, keys, args)
        n = plan.calls[phase]
        plan.calls[phase] = n + 1
        if phase != plan.step.phase or n != plan.step.index:
            return await self.inner.script(script, keys, args)
        plan.fired = True
        if plan.step.when == "before":
            await plan.action(plan.step)
            return await self.inner.script(script, keys, args)  # the action did not stop it
        reply = await self.inner.script(script, keys, args)
        await plan.action(plan.step)
        return reply


def pick_keys(rng: random.Random) -> list[int]:
    return sorted(rng.sample(range(KEYS), rng.randint(3, 8)))


class RampSession:
    """One writer: unique values and versions, each transaction recorded."""

    def __init__(self, st: Stampede, history: History, session: int, process: str) -> None:
        if not 0 <= session < 1 << _SESSION_BITS:
            raise ValueError("sessions are 0..1023")
        self.st = st
        self.history = history
        self.session = session
        self.process = process
        self.clock = HybridClock()
        self.txns = 0
        self._values = 0
        self._last = 0

    def next_version(self) -> int:
        # An application version (microseconds, below 2**56), the low bits the session.
        micros = self.clock.now() // 1000
        v = (micros >> _SESSION_BITS << _SESSION_BITS) | self.session
        if v <= self._last:
            v = self._last + (1 << _SESSION_BITS)
        self._last = v
        return v

    def next_value(self) -> int:
        self._values += 1
        return self.session * VALUE_BASE + self._values

    def steps_of(self, keys: Sequence[int]) -> dict[str, int]:
        """How many PREPARE and COMMIT calls a transaction over `keys` makes."""
        raw = [key_name(k) for k in keys]
        if len({self.st.topology.slot_of(k) for k in raw}) == 1:
            return {"prepare": 0, "commit": 1}
        units = len(call_units(self.st.topology, raw))
        return {"prepare": units, "commit": units}

    async def transact(
        self,
        keys: Sequence[int],
        plan: StepPlan | None = None,
        *,
        deletes: Collection[int] = (),
        ttl: float | None = None,
    ) -> str:
        """Write a unique value at each key in one transaction (`tx.delete` the keys in
        `deletes`, written as null; the values live `ttl` seconds); the completion's type."""
        self.txns += 1
        writes = {k: None if k in deletes else self.next_value() for k in keys}
        version = self.next_version()
        op = self.history.next_op(self.process)
        extra: dict[str, float] = {} if ttl is None else {"ttl": ttl}
        if deletes:  # how long its tombstones live
            extra["grace"] = self.st.options.tombstone_grace
        self.history.record(
            "invoke", op, f="txn", session=self.session, txn=self.txns, version=version,
            writes={str(k): v for k, v in writes.items()},
            step=None if plan is None else str(plan.step), **extra,
        )  # fmt: skip
        tx = self.st.transaction(version=version, ttl=ttl)
        for k, v in writes.items():
            if v is None:
                tx.delete(key_name(k))
            else:
                tx.set(key_name(k), b"%d" % v)
        token = CURRENT_STEP.set(plan)
        sent = time.monotonic()  # the expiry instants are computed now (the invoke's `t`
        try:  # came before its record was written, which can stall)
            receipt = await tx.commit()
        except TransactionAborted as exc:
            self.history.record("fail", op, f="txn", error=type(exc).__name__,
                                msg=str(exc)[:200], sent=sent)  # fmt: skip
            return "fail"
        except asyncio.CancelledError:
            self.history.record("unknown", op, f="txn", error="CancelledError", sent=sent)
            raise
        except Exception as exc:
            self.history.record("unknown", op, f="txn", error=type(exc).__name__,
                                msg=str(exc)[:200], sent=sent)  # fmt: skip
            return "unknown"
        finally:
            CURRENT_STEP.reset(token)
        pending = [k.decode() for k in receipt.pending]
        superseded = [k.decode() for k in receipt.superseded]
        durable = {} if receipt.durable is None else {"durable": receipt.durable}
        self.history.record("ok", op, f="txn", token=receipt.token, pending=pending,
                            superseded=superseded, sent=sent, **durable)  # fmt: skip
        return "ok"


async def seed(st: Stampede, history: History) -> None:
    """Session 0 writes every key once (one-key transactions): reads never meet nothing."""
    session = RampSession(st, history, 0, "seed")
    for k in range(KEYS):
        await session.transact([k])


async def read_once(
    st: Stampede, history: History, session: int, txn: int, keys: Sequence[int], *,
    final: bool = False,
) -> bool:  # fmt: skip
    """One `read_atomic` of `keys`, recorded (`final`: the last read of a run)."""
    op = history.next_op(f"r{session}")
    extra = {"final": True} if final else {}
    history.record("invoke", op, f="rread", session=session, txn=txn, keys=list(keys), **extra)
    try:
        got = await st.read_atomic([key_name(k) for k in keys])
    except Exception as exc:
        history.record("fail", op, f="rread", error=type(exc).__name__, msg=str(exc)[:200])
        return False
    values = {
        str(k): None if v is None else int(v)
        for k, v in zip(keys, got.values.values(), strict=True)
    }
    history.record("ok", op, f="rread", values=values, rounds=got.rounds, attempts=got.attempts)
    return True


async def read_loop(
    st: Stampede,
    history: History,
    session: int,
    rng: random.Random,
    until: float,
    pick: Callable[[random.Random], list[int]] = pick_keys,
) -> int:
    """Read random subsets (`pick`: 3-8 keys) until `time.monotonic() >= until`; how many."""
    txn = 0
    while time.monotonic() < until:
        txn += 1
        if not await read_once(st, history, session, txn, pick(rng)):
            await asyncio.sleep(0.02)
    return txn
