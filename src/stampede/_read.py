"""Read a group in one round trip per shard, judge it, retry while a write may be in flight."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from . import _deadline as deadlines
from . import _pipeline as pipeline
from . import metrics, tracing
from ._kept import newest_whole
from .errors import ReadTimeout, TornReadError
from .options import RetryPolicy
from .results import ReadResult, RepairAction, RepairOutcome
from .topology._base import READ_WATCH, ReadWatch
from .typing import DEFAULT_GRACE, RepairContext, RepairStrategy, Topology, VersionSource
from .verdict import Mode, Observation, Status, Verdict, judge, live_write, stamped
from .versions import HybridClock
from .wire import Envelope

__all__ = ["read_group", "traced_read"]

K = TypeVar("K", bytes, str)
_log = logging.getLogger("stampede.reader")


async def read_group(
    topology: Topology,
    group: bytes,
    names: Sequence[K],
    keys: Sequence[bytes],
    *,
    mode: Mode,
    retry: RetryPolicy,
    repair: RepairStrategy | None = None,
    versions: VersionSource | None = None,
    ttl: float | None = None,
    grace: float = DEFAULT_GRACE,
    version_grace: float = 5.0,
) -> ReadResult[K]:
    """Read until the group is consistent, not found, or stays torn, within
    `retry.deadline` (socket waits included: a bucketed timer, no task), else
    `ReadTimeout` naming the shards it still waited on.

    A group whose newest write is still in flight reads as the newest write every
    key still has among its kept versions (`stampede._kept`), with one more round
    trip; only when there is none does the read retry with backoff. A group that
    stays torn goes to `repair` when given, else raises `TornReadError`. A
    strategy with `fills_missing` set also gets not-found groups (read-through).
    """
    seconds = retry.deadline
    if seconds is not None:
        watch = ReadWatch()
        token = READ_WATCH.set(watch)
        timer = deadlines.start(seconds)
    started = time.monotonic()
    try:
        if mode is Mode.STAMP:  # `pipeline.observe`, without a coroutine of its own
            obs = stamped(group, keys, await topology.fetch(keys))
        else:
            obs = await pipeline.observe(topology, group, keys, mode)
        env = live_write(obs)
        if env is not None:  # consistent (`judge`'s common case), in this frame
            return _live(names, obs, env, versions)
        verdict = judge(obs)
        if verdict.status is Status.CONSISTENT:
            return _whole(names, obs, verdict, 1, versions)
        return await _settle(
            topology, group, names, keys, mode, retry, repair, versions, (ttl, grace,
            version_grace), started, obs, verdict,
        )  # fmt: skip
    except asyncio.CancelledError:
        if seconds is None or not timer.expired_by_us():
            raise
        raise _late(topology, group, keys, seconds, watch) from None
    finally:
        if seconds is not None:
            timer.done()
            READ_WATCH.reset(token)


async def _settle(
    topology: Topology,
    group: bytes,
    names: Sequence[K],
    keys: Sequence[bytes],
    mode: Mode,
    retry: RetryPolicy,
    repair: RepairStrategy | None,
    versions: VersionSource | None,
    windows: tuple[float | None, float, float],
    started: float,
    obs: Observation,
    verdict: Verdict,
) -> ReadResult[K]:
    """`read_group` from its first observation and verdict on: retries, kept
    versions, repair (`windows`: the repair's ttl, tombstone and version grace)."""
    deadline = None if retry.deadline is None else started + retry.deadline
    attempt = 1
    while True:
        if verdict.status is Status.CONSISTENT:
            return _whole(names, obs, verdict, attempt, versions)
        if verdict.status is Status.NOT_FOUND:
            if repair is not None and getattr(repair, "fills_missing", False):
                break
            return result_of(names, obs, verdict, attempt)
        if verdict.status is Status.IN_FLIGHT:
            whole = await newest_whole(topology, obs)
            if whole is not None:  # the newest write every key still has
                metrics.kept_read()
                return _whole(names, whole, judge(whole), attempt, versions)
        if verdict.status is Status.TORN or attempt >= retry.attempts:
            break
        pause = retry.delay(attempt - 1)
        if deadline is not None and time.monotonic() + pause >= deadline:
            break
        metrics.read_retry()
        await asyncio.sleep(pause)
        attempt += 1
        obs = await pipeline.observe(topology, group, keys, mode)
        verdict = judge(obs)
    final = verdict.exhausted()
    if repair is None:
        _report_torn(group, final, attempt)
        raise TornReadError(
            group.decode("utf-8", "backslashreplace"),
            reason=str(final.reason),
            observation=obs,
            attempts=attempt,
        )
    if final.status is Status.TORN:
        _report_torn(group, final, attempt)
    ctx = RepairContext(topology, mode, versions or HybridClock(), *windows)
    outcome = await pipeline.repair(repair, ctx, obs, final, source="read")
    metrics.log_event(
        _log, "read.repaired", logging.INFO, group=_name(group), action=outcome.action.value
    )
    return result_of_repair(names, obs, final, outcome, attempt)


def _name(group: bytes) -> str:
    return group.decode("utf-8", "backslashreplace")


def _late(
    topology: Topology, group: bytes, keys: Sequence[bytes], deadline: float, watch: ReadWatch
) -> ReadTimeout:
    """`ReadTimeout` naming the shards a late read waited on (else all of its keys')."""
    late = watch.waiting or sorted({topology.shard_of(k) for k in keys})
    return ReadTimeout(_name(group), shard=", ".join(late), deadline=deadline)


async def traced_read(
    read: Coroutine[Any, Any, ReadResult[K]], group: bytes, keys: int, mode: Mode
) -> ReadResult[K]:
    """`read` (a `read_group`) in its `stampede.read` span, when spans are recorded."""
    with tracing.span("read", group=_name(group), keys=keys, mode=mode.value) as traced:
        result = await read
        traced.set(
            status=result.status.value,
            attempts=result.attempts,
            reason=None if result.reason is None else result.reason.value,
            repaired=result.repaired,
            queued=result.queued,
        )
    return result


def _live(
    names: Sequence[K], obs: Observation, env: Envelope, versions: VersionSource | None
) -> ReadResult[K]:
    """`_whole` of a first attempt whose keys all hold `env`'s write (`live_write`)."""
    if versions is not None:
        versions.observe(env.version)
    values: dict[K, bytes | None] = {}
    for name, each in zip(names, obs.envelopes, strict=True):
        values[name] = None if each is None or each.tombstone else each.payload
    return ReadResult.judged(
        obs.group, Status.CONSISTENT, values, env.version, env.token, 1, None, obs
    )


def _whole(
    names: Sequence[K],
    obs: Observation,
    verdict: Verdict,
    attempt: int,
    versions: VersionSource | None,
) -> ReadResult[K]:
    """A consistent (or not found) result; the version source learns its version."""
    if versions is not None and verdict.envelope is not None:
        versions.observe(verdict.envelope.version)
    return result_of(names, obs, verdict, attempt)


def _report_torn(group: bytes, final: Verdict, attempts: int) -> None:
    reason = str(final.reason or "torn")
    metrics.torn_read(reason)
    metrics.log_event(
        _log, "read.torn", logging.INFO, group=_name(group), reason=reason, attempts=attempts
    )


def result_of_repair(
    names: Sequence[K],
    obs: Observation,
    verdict: Verdict,
    outcome: RepairOutcome,
    attempts: int,
) -> ReadResult[K]:
    """The read result a repair hands back: whole when it repaired, else queued."""
    values = {name: outcome.values.get(key) for name, key in zip(names, obs.keys, strict=True)}
    version, token = outcome.stamp if outcome.stamp is not None else (None, None)
    whole = outcome.consistent
    if not whole:
        status = Status.TORN
    elif all(v is None for v in values.values()):
        status = Status.NOT_FOUND
    else:
        status = Status.CONSISTENT
    return ReadResult(
        group=obs.group,
        status=status,
        values=values,
        version=version if whole else None,
        token=token if whole else None,
        attempts=attempts,
        reason=verdict.reason,
        repaired=whole
        and outcome.action not in (RepairAction.LOST_RACE, RepairAction.ALREADY_CONSISTENT),
        queued=outcome.action is RepairAction.QUEUED,
        observation=obs,
        repair=outcome,
    )


def result_of(
    names: Sequence[K], obs: Observation, verdict: Verdict, attempts: int
) -> ReadResult[K]:
    """A `ReadResult` from an observation: payloads under the caller's key names."""
    values: dict[K, bytes | None] = {}
    for name, env, raw in zip(names, obs.envelopes, obs.raw, strict=True):
        values[name] = raw if env is None else None if env.tombstone else env.payload
    env = verdict.envelope
    if env is None:
        version, token = None, None
    else:
        version, token = env.version, env.token
    return ReadResult.judged(
        obs.group, verdict.status, values, version, token, attempts, verdict.reason, obs
    )
