"""Record every operation of a workload: `RecordingStampede` and `RecordingRepair`.

```python
history = History("run.jsonl")
st = RecordingStampede(stampede.Stampede(FaultyTopology(topology)), history, process="w1")
await st.write(group, values)                           # invoke + ok / fail / unknown
await st.read(group, keys, repair=CHAOS_REPAIR)         # invoke + ok / fail, and the repair
```

Workloads use the normal `Stampede` API through the wrapper. A write that raises
is `fail` when the fault-injecting topology saw it send nothing, else `unknown`
(some of it may have landed). A repair strategy given to `read` (or the default
one) is wrapped in `RecordingRepair`, which records what the repair saw and what
it did; the worker subprocess uses the same wrapper (`worker_strategy`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from stampede._client import Stampede
from stampede._pipeline import observe as observe_group
from stampede.errors import RepairError, TornReadError
from stampede.keys import to_bytes
from stampede.options import RetryPolicy
from stampede.repair._base import best_effort
from stampede.repair._strategies import NewestWins
from stampede.results import ReadResult, Receipt, RepairAction, RepairOutcome
from stampede.typing import RepairContext, RepairStrategy, VersionSource
from stampede.verdict import Mode, Observation, Status, Verdict, judge
from stampede.versions import Counter

from .faults import FaultyTopology
from .history import CURRENT_OP, History, OpContext, parse_payload, payload_of, text

__all__ = [
    "CHAOS_REPAIR",
    "RecordingRepair",
    "RecordingStampede",
    "rebuild_from_newest",
    "seen_of",
    "worker_strategy",
]

K = TypeVar("K", bytes, str)
ModeName = Mode | Literal["stamp", "commit"]


def rebuild_from_newest(truth: Mapping[bytes, bytes], stale: Sequence[bytes]) -> dict[bytes, bytes]:
    """`NewestWins` rebuild: each stale key gets the newest write's payload for that key.

    The workload's payloads name their write (`payload_of`), so the newest write
    can be completed exactly as its writer would have written it.
    """
    for payload in truth.values():
        parsed = parse_payload(payload)
        if parsed is not None:
            writer, seq = parsed[0].split(":")
            return {key: payload_of(writer, int(seq), key) for key in stale}
    raise RepairError("?", "no key holds a workload payload to rebuild the others from")


CHAOS_REPAIR = NewestWins(rebuild=rebuild_from_newest)
"""The repair every scenario uses: complete the newest write, whatever reached Redis."""


def seen_of(obs: Observation | None) -> dict[str, list[Any] | None]:
    """key -> [stamp, payload] (stamp None for an unstamped value), or None when missing."""
    if obs is None:
        return {}
    out: dict[str, list[Any] | None] = {}
    for key, raw, env in zip(obs.keys, obs.raw, obs.envelopes, strict=True):
        if raw is None:
            out[text(key)] = None
        elif env is None:
            out[text(key)] = [None, text(raw)]
        else:
            out[text(key)] = [[env.version, env.token], text(env.payload)]
    return out


def _record_stamp(obs: Observation) -> list[Any] | None:
    record = obs.commit()
    return None if record is None else [record.version, record.token]


class RecordingRepair:
    """A `RepairStrategy` that records what `inner` was given and what it did.

    In the runner's process, the repair belongs to the read that called it and its
    read began when that read did. With `reobserve=True` (the worker subprocess)
    it reads the group again itself first, so the history knows when the repair's
    read began; a group found whole again is left alone (`already_consistent`).
    """

    def __init__(
        self,
        inner: RepairStrategy,
        history: History,
        process: str,
        *,
        reobserve: bool = False,
        delay: float = 0.0,
    ) -> None:
        self.inner = inner
        self.history = history
        self.process = process
        self.reobserve = reobserve
        self.delay = delay

    @property
    def name(self) -> str:
        return f"recorded-{self.inner.name}"

    @property
    def fills_missing(self) -> bool:
        return bool(getattr(self.inner, "fills_missing", False))

    async def repair(self, ctx: RepairContext, obs: Observation, verdict: Verdict) -> RepairOutcome:
        parent = CURRENT_OP.get()
        began = parent.began if parent is not None else time.monotonic()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.reobserve:
            began = time.monotonic()
            obs = await observe_group(ctx.topology, obs.group, obs.keys, obs.mode)
            fresh = judge(obs)
            verdict = fresh.exhausted()
        op = self.history.next_op(self.process)
        self.history.record(
            "invoke",
            op,
            f="repair",
            proc=self.process,
            parent=None if parent is None else parent.op,
            group=text(obs.group),
            mode=obs.mode.value,
            began=began,
            seen=seen_of(obs),
            record=_record_stamp(obs),
            reason=None if verdict.reason is None else verdict.reason.value,
            strategy=self.inner.name,
        )
        try:
            if verdict.status in (Status.CONSISTENT, Status.NOT_FOUND):
                env = verdict.envelope
                outcome = RepairOutcome(
                    obs.group,
                    RepairAction.ALREADY_CONSISTENT,
                    None,
                    best_effort(obs),
                    True,
                    stamp=None if env is None else (env.version, env.token),
                )
            else:
                outcome = await self.inner.repair(ctx, obs, verdict)
        except BaseException as exc:
            self.history.record("fail", op, f="repair", error=type(exc).__name__)
            raise
        self.history.record(
            "ok",
            op,
            f="repair",
            action=outcome.action.value,
            consistent=outcome.consistent,
            stamp=None if outcome.stamp is None else list(outcome.stamp),
            values={text(k): None if v is None else text(v) for k, v in outcome.values.items()},
        )
        return outcome

    def __repr__(self) -> str:
        return f"RecordingRepair({self.inner!r})"


class RecordingStampede:
    """A `Stampede` whose writes and reads are recorded in `history` as `process`."""

    def __init__(self, st: Stampede, history: History, *, process: str) -> None:
        self.st = st
        self.history = history
        self.process = process

    @property
    def versions(self) -> VersionSource:
        return self.st.versions

    def _mode(self, mode: ModeName | None) -> Mode:
        return self.st.options.mode if mode is None else Mode(mode)

    async def write(
        self,
        group: bytes | str,
        values: Mapping[K, bytes | str],
        *,
        mode: ModeName | None = None,
        versions: Literal["hybrid", "counter"] | VersionSource | None = None,
        ttl: float | None = None,
        version: int | None = None,
        before: Callable[[], Awaitable[int | None]] | None = None,
    ) -> Receipt:
        """`Stampede.write`, recorded: invoke, then ok, fail (nothing sent) or unknown.

        `before` runs after the invoke is recorded and before the write (the
        database update of a cache-aside writer); what it returns is the write's
        `version=`. The events record `ttl` and that application version.
        """
        gkey, chosen = to_bytes(group), self._mode(mode)
        op = self.history.next_op(self.process)
        invoked = self.history.record(
            "invoke",
            op,
            f="write",
            proc=self.process,
            group=text(gkey),
            mode=chosen.value,
            keys=[text(k) for k in values],
            values={text(k): text(v) for k, v in values.items()},
            counter=isinstance(self.st.versions if versions is None else versions, Counter)
            or versions == "counter",
            ttl=ttl,
        )
        ctx = OpContext(op, "write", gkey, chosen.value, began=invoked["t"], app_version=version)
        reset = CURRENT_OP.set(ctx)
        try:
            if before is not None:
                ctx.app_version = version = await before()
            extra: dict[str, Any] = {} if version is None else {"version": version}
            receipt = await self.st.write(
                group, values, mode=chosen, versions=versions, ttl=ttl, **extra
            )
        except BaseException as exc:
            known = isinstance(self.st.topology, FaultyTopology)
            self.history.record(
                "fail" if known and not ctx.sent else "unknown",
                op,
                f="write",
                error=type(exc).__name__,
                crash=ctx.crash,
                sent=sorted(text(k) for k in ctx.sent),
                version=ctx.version,
                token=ctx.token,
                app_version=ctx.app_version,
            )
            raise
        finally:
            CURRENT_OP.reset(reset)
        self.history.record(
            "ok",
            op,
            f="write",
            version=receipt.version,
            token=receipt.token,
            superseded=[text(k) for k in receipt.superseded],
            atomic=receipt.atomic,
            app_version=version,
        )
        return receipt

    async def delete(
        self,
        group: bytes | str,
        keys: Sequence[K],
        *,
        mode: ModeName | None = None,
        version: int | None = None,
    ) -> Receipt:
        """`Stampede.delete`, recorded as `f: delete`: invoke, then ok or unknown (with the
        stamp its tombstones carry, when the fault-injecting topology saw them go out)."""
        gkey, chosen = to_bytes(group), self._mode(mode)
        op = self.history.next_op(self.process)
        invoked = self.history.record(
            "invoke",
            op,
            f="delete",
            proc=self.process,
            group=text(gkey),
            mode=chosen.value,
            keys=[text(k) for k in keys],
        )
        ctx = OpContext(op, "delete", gkey, chosen.value, began=invoked["t"], app_version=version)
        reset = CURRENT_OP.set(ctx)
        try:
            extra: dict[str, Any] = {} if version is None else {"version": version}
            receipt = await self.st.delete(group, keys, mode=chosen, **extra)
        except BaseException as exc:
            self.history.record(
                "fail"
                if isinstance(self.st.topology, FaultyTopology) and not ctx.sent
                else "unknown",
                op,
                f="delete",
                error=type(exc).__name__,
                version=ctx.version,
                token=ctx.token,
                app_version=version,
            )
            raise
        finally:
            CURRENT_OP.reset(reset)
        self.history.record(
            "ok",
            op,
            f="delete",
            version=receipt.version,
            token=receipt.token,
            superseded=[text(k) for k in receipt.superseded],
            app_version=version,
        )
        return receipt

    async def read(
        self,
        group: bytes | str,
        keys: Sequence[K],
        *,
        mode: ModeName | None = None,
        retry: RetryPolicy | None = None,
        repair: RepairStrategy | None = None,
        final: bool = False,
    ) -> ReadResult[K]:
        """`Stampede.read`, recorded with its verdict, values and any repair it ran.

        `final=True` marks the reads that establish the end state for the checker.
        """
        gkey, chosen = to_bytes(group), self._mode(mode)
        op = self.history.next_op(self.process)
        strategy = repair if repair is not None else self.st.options.repair
        wrapped = (
            None if strategy is None else RecordingRepair(strategy, self.history, self.process)
        )
        invoked = self.history.record(
            "invoke",
            op,
            f="read",
            proc=self.process,
            group=text(gkey),
            mode=chosen.value,
            keys=[text(k) for k in keys],
            final=final,
        )
        ctx = OpContext(op, "read", gkey, chosen.value, began=invoked["t"])
        reset = CURRENT_OP.set(ctx)
        try:
            result = await self.st.read(group, keys, mode=chosen, retry=retry, repair=wrapped)
        except BaseException as exc:
            seen = seen_of(exc.observation) if isinstance(exc, TornReadError) else None
            self.history.record(
                "fail", op, f="read", error=type(exc).__name__, seen=seen, final=final
            )
            raise
        finally:
            CURRENT_OP.reset(reset)
        self.history.record(
            "ok",
            op,
            f="read",
            status=result.status.value,
            values={text(k): None if v is None else text(v) for k, v in result.values.items()},
            version=result.version,
            token=result.token,
            attempts=result.attempts,
            reason=None if result.reason is None else result.reason.value,
            repaired=result.repaired,
            queued=result.queued,
            seen=seen_of(result.observation),
            final=final,
        )
        return result

    async def aclose(self) -> None:
        await self.st.aclose()


def worker_strategy() -> RecordingRepair:
    """The repair worker's strategy in the chaos runs (`chaos.recording:worker_strategy`).

    `CHAOS_REPAIR`, recorded to the JSON-lines file `$STAMPEDE_CHAOS_HISTORY` as
    process `$STAMPEDE_CHAOS_PROCESS`, waiting `$STAMPEDE_CHAOS_REPAIR_DELAY`
    seconds before each repair so a worker can be killed with jobs in hand.
    """
    path = os.environ.get("STAMPEDE_CHAOS_HISTORY")
    history = History(path) if path else History()
    process = os.environ.get("STAMPEDE_CHAOS_PROCESS", f"worker-{os.getpid()}")
    delay = float(os.environ.get("STAMPEDE_CHAOS_REPAIR_DELAY", "0") or 0)
    return RecordingRepair(CHAOS_REPAIR, history, process, reobserve=True, delay=delay)
