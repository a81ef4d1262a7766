"""Fault injection: a `Topology` that crashes writers, and server faults with a record.

`FaultyTopology` wraps a real topology and implements the `Topology` protocol by
delegation. For the writes a plan picks, it stops the writer at one crash point:

| point                  | what reached Redis                                    |
| ---------------------- | ----------------------------------------------------- |
| `before-first-shard`   | nothing                                               |
| `between-shards`       | the keys of one shard (the first of the write's)      |
| `before-commit-record` | every data key, no commit record (commit mode)        |
| `after-last-write`     | the whole write; only the acknowledgement is lost     |

The crash either raises `InjectedCrash` (the writer's call fails) or cancels the
writer's task (`asyncio.CancelledError`), as a process dying or a task being
cancelled would. Two styles make part of a write land late, with its stamp:

- `delay`: what a crash at the point would not have sent is held for
  `late_after` seconds and then sent; the writer waits and carries on (a slow
  link to one shard, after readers had time to see the group torn and repair it);
- `retry`: the writer's call fails as with `raise`, and `late_after` seconds
  later the call it was in is sent again, whole, with the same stamp (a client
  library retrying a request the application already gave up on).

Each hold and late send is a `fault` event (`hold`, `late-send`, `late-sent`).

Only operations that `RecordingStampede` marks as writes (through
`CURRENT_OP`) are candidates; reads and repairs pass through untouched.

Server faults (`kill_and_restart`, `pause_and_resume`, `migrate_slot`) act on the
`stampede.testing` harness and record `fault` events in the history.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from stampede.testing.faults import DelegatingTopology
from stampede.topology._base import WriteOutcome
from stampede.topology._guard import KEEP_MS
from stampede.typing import Topology
from stampede.verdict import Mode
from stampede.wire import commit_key

from .history import CURRENT_OP, History, OpContext, text
from .late import Late

if TYPE_CHECKING:
    from stampede.testing import LocalCluster, RedisNode

__all__ = [
    "Crash",
    "CrashPlan",
    "CrashPoint",
    "CrashStyle",
    "EveryNth",
    "FaultyTopology",
    "InjectedCrash",
    "kill_and_restart",
    "migrate_slot",
    "pause_and_resume",
]


class CrashPoint(StrEnum):
    BEFORE_FIRST_SHARD = "before-first-shard"
    BETWEEN_SHARDS = "between-shards"
    BEFORE_COMMIT_RECORD = "before-commit-record"
    AFTER_LAST_WRITE = "after-last-write"


class CrashStyle(StrEnum):
    RAISE = "raise"  # the write call raises InjectedCrash
    CANCEL = "cancel"  # the writer's task is cancelled
    DELAY = "delay"  # the unsent rest is held, then sent late; the writer waits
    RETRY = "retry"  # raises, then the call is resent whole (same stamp) later


class InjectedCrash(Exception):
    """A writer stopped by `FaultyTopology` at `point` (not a StampedeError: a simulated death)."""

    def __init__(self, point: CrashPoint) -> None:
        super().__init__(f"writer crashed {point.value} (injected)")
        self.point = point


@dataclass(frozen=True, slots=True)
class Crash:
    point: CrashPoint
    style: CrashStyle = CrashStyle.RAISE


CrashPlan = Callable[[OpContext, Sequence[CrashPoint]], Crash | None]
"""Chooses, once per write, whether and where it crashes among the applicable points."""


class EveryNth:
    """Crash every `n`-th write, cycling through the applicable points and the styles."""

    def __init__(
        self, n: int, styles: Sequence[CrashStyle] = (CrashStyle.RAISE, CrashStyle.CANCEL)
    ) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self.n = n
        self.styles = tuple(styles)
        self._writes = 0
        self._crashes = 0

    def __call__(self, ctx: OpContext, points: Sequence[CrashPoint]) -> Crash | None:
        self._writes += 1
        if self._writes % self.n or not points:
            return None
        self._crashes += 1
        point = points[self._crashes % len(points)]
        style = self.styles[(self._crashes // len(points)) % len(self.styles)]
        return Crash(point, style)


class FaultyTopology(DelegatingTopology):
    """A `Topology` that delegates to `inner` and crashes the writes `plan` (or `arm`) picks."""

    def __init__(
        self,
        inner: Topology,
        *,
        plan: CrashPlan | None = None,
        history: History | None = None,
        late_after: float = 0.3,
    ) -> None:
        super().__init__(inner)
        self.plan = plan
        self.history = history
        self.late_after = late_after
        self.injected: collections.Counter[str] = collections.Counter()
        self._armed: list[tuple[Crash, bytes | None]] = []
        self._late: set[asyncio.Task[None]] = set()

    def arm(self, crash: Crash, *, group: bytes | str | None = None) -> None:
        """Crash the next write (of `group`, if given) as `crash` says, once."""
        self._armed.append((crash, None if group is None else _bytes(group)))

    async def write_guarded(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        *,
        version: int,
        token: str,
        expire_at_ms: int | None = None,
        limit: int = 0,
        keep_ms: int = KEEP_MS,
        replicas: int = 0,
        wait_ms: int = 1000,
        aof: bool = False,
    ) -> WriteOutcome:
        ctx = CURRENT_OP.get()
        if ctx is not None and ctx.f == "delete":
            ctx.version, ctx.token = version, token
            ctx.sent.update(keys)
        if ctx is None or ctx.f != "write":
            return await self.inner.write_guarded(
                keys,
                values,
                version=version,
                token=token,
                expire_at_ms=expire_at_ms,
                limit=limit,
                keep_ms=keep_ms,
                replicas=replicas,
                wait_ms=wait_ms,
                aof=aof,
            )
        ctx.version, ctx.token = version, token
        ckey = commit_key(ctx.group)
        is_record = list(keys) == [ckey]
        if not ctx.decided:
            ctx.decided = True
            chosen = self._choose(ctx, keys, last=ckey in keys or ctx.mode != Mode.COMMIT)
            ctx.planned = chosen
        crash: Crash | None = ctx.planned
        point = None if crash is None else crash.point

        async def send(which: Sequence[int]) -> WriteOutcome:
            sub = [keys[i] for i in which]
            ctx.sent.update(sub)
            return await self.inner.write_guarded(
                sub,
                [values[i] for i in which],
                version=version,
                token=token,
                expire_at_ms=expire_at_ms,
                limit=limit,
                keep_ms=keep_ms,
            )

        everything = range(len(keys))
        if crash is None:
            return await send(everything)
        late = Late(self, ctx, keys, values, version, token, expire_at_ms, limit)
        if (point is CrashPoint.BEFORE_FIRST_SHARD and not is_record) or (
            point is CrashPoint.BEFORE_COMMIT_RECORD and is_record
        ):
            if crash.style is CrashStyle.DELAY:
                return await late.hold(everything, early=None)
            await self._crash(ctx, crash, late)
        if point is CrashPoint.BETWEEN_SHARDS and not is_record:
            first = self.inner.shard_of(keys[0])
            sent_first = [i for i in everything if self.inner.shard_of(keys[i]) == first]
            if crash.style is CrashStyle.DELAY:
                rest = [i for i in everything if i not in sent_first]
                return await late.hold(rest, early=await send(sent_first))
            await send(sent_first)
            await self._crash(ctx, crash, late)
        outcome = await send(everything)
        last = is_record or ckey in keys or ctx.mode != Mode.COMMIT
        if point is CrashPoint.AFTER_LAST_WRITE and last and outcome.ok:
            if crash.style is CrashStyle.DELAY:
                ctx.planned = None
                return outcome
            await self._crash(ctx, crash, late)
        return outcome

    async def drain(self) -> None:
        """Wait for every late send (`retry`) still to come."""
        while self._late:
            await asyncio.gather(*list(self._late), return_exceptions=True)

    # -- internals -------------------------------------------------------------------

    def _choose(self, ctx: OpContext, keys: Sequence[bytes], *, last: bool) -> Crash | None:
        """The crash for this write: an armed one first, else the plan's."""
        for i, (crash, group) in enumerate(self._armed):
            if group is None or group == ctx.group:
                del self._armed[i]
                return crash
        if self.plan is None:
            return None
        points = [CrashPoint.BEFORE_FIRST_SHARD]
        if len({self.inner.shard_of(k) for k in keys}) > 1:
            points.append(CrashPoint.BETWEEN_SHARDS)
        if not last:
            points.append(CrashPoint.BEFORE_COMMIT_RECORD)
        points.append(CrashPoint.AFTER_LAST_WRITE)
        return self.plan(ctx, points)

    async def _crash(self, ctx: OpContext, crash: Crash, late: Late | None = None) -> None:
        ctx.planned = None
        ctx.crash = crash.point.value
        self.injected[crash.point.value] += 1
        if self.history is not None:
            self.history.fault(
                "crash",
                point=crash.point.value,
                style=crash.style.value,
                write=ctx.op,
                group=text(ctx.group),
                sent=sorted(text(k) for k in ctx.sent),
            )
        if crash.style is CrashStyle.RETRY and late is not None:
            resend = asyncio.get_running_loop().create_task(late.resend())
            self._late.add(resend)
            resend.add_done_callback(self._late.discard)
        if crash.style is CrashStyle.CANCEL:
            task = asyncio.current_task()
            if task is not None:
                task.cancel()
                await asyncio.sleep(0)  # delivers the CancelledError here
        raise InjectedCrash(crash.point)


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


# -- server faults on the stampede.testing harness ----------------------------------------


async def kill_and_restart(
    node: RedisNode,
    history: History,
    *,
    shard: str,
    keys: Sequence[bytes],
    down: float,
    cluster: LocalCluster | None = None,
) -> None:
    """SIGKILL `node`, leave it down `down` seconds, restart it empty; record both.

    `keys` are the workload's keys (data, records, counters) that lived on it: the
    writes that touched them before the kill may be lost, and the checker says which.
    """
    node.kill()
    history.fault("kill", shard=shard, keys=sorted(text(k) for k in keys))
    await asyncio.sleep(down)
    node.restart()  # on the event loop's thread: a short stall, and a parent-death signal
    history.fault("restart", shard=shard)
    if cluster is not None:
        await asyncio.to_thread(cluster.wait_until_ok, 30.0)
        history.fault("cluster-ok", shard=shard)


async def pause_and_resume(
    node: RedisNode,
    history: History,
    *,
    shard: str,
    paused: float,
    cluster: LocalCluster | None = None,
) -> None:
    """SIGSTOP `node` for `paused` seconds, then SIGCONT it; record both."""
    node.pause()
    history.fault("pause", shard=shard, seconds=paused)
    await asyncio.sleep(paused)
    node.resume()
    history.fault("resume", shard=shard)
    if cluster is not None:
        await asyncio.to_thread(cluster.wait_until_ok, 30.0)


async def migrate_slot(
    cluster: LocalCluster,
    history: History,
    *,
    slot: int,
    target: RedisNode,
    keys: Sequence[bytes] = (),
    step: float = 0.0,
) -> float:
    """Move `slot` with its keys to `target` while the workload runs; returns the seconds.

    With `keys` and `step`, the slot stays open (IMPORTING/MIGRATING) while `keys`
    move one at a time, `step` seconds apart, so clients meet ASK and TRYAGAIN with
    the slot's keys split between the two masters; then the rest move and the slot
    is handed over (MOVED from then on).
    """
    source = cluster.master_for_slot(slot)
    history.fault("migrate", slot=slot, source=source.address, target=target.address)
    started = time.monotonic()
    await asyncio.to_thread(cluster.begin_migration, slot, target)
    for key in keys:
        await asyncio.sleep(step)
        await asyncio.to_thread(cluster.move_keys, slot, [key])
    await asyncio.sleep(step)
    await asyncio.to_thread(cluster.finish_migration, slot)
    history.fault("migrated", slot=slot, target=target.address)
    return time.monotonic() - started
