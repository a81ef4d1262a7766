"""Read a group in one round trip per shard, judge it, retry while a write may be in flight."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TypeVar

from . import _pipeline as pipeline
from . import metrics
from ._kept import newest_whole
from .errors import TornReadError
from .options import RetryPolicy
from .results import ReadResult, RepairAction, RepairOutcome
from .typing import DEFAULT_GRACE, RepairContext, RepairStrategy, Topology, VersionSource
from .verdict import Mode, Observation, Status, Verdict, judge, stamped
from .versions import HybridClock

__all__ = ["read_group"]

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
) -> ReadResult[K]:
    """Read until the group is consistent, not found, or stays torn.

    A group whose newest write is still in flight reads as the newest write every
    key still has among its kept versions (`stampede._kept`), with one more round
    trip; only when there is none does the read retry with backoff. A group that
    stays torn goes to `repair` when given, else raises `TornReadError`. A
    strategy with `fills_missing` set also gets not-found groups (read-through).
    """
    started = time.monotonic()
    deadline = None if retry.deadline is None else started + retry.deadline
    attempt = 0
    while True:
        attempt += 1
        if mode is Mode.STAMP:  # `pipeline.observe`, without a coroutine of its own
            obs = stamped(group, keys, await topology.fetch(keys))
        else:
            obs = await pipeline.observe(topology, group, keys, mode)
        verdict = judge(obs)
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
    ctx = RepairContext(topology, mode, versions or HybridClock(), ttl, grace)
    outcome = await pipeline.repair(repair, ctx, obs, final, source="read")
    metrics.log_event(
        _log, "read.repaired", logging.INFO, group=_name(group), action=outcome.action.value
    )
    return result_of_repair(names, obs, final, outcome, attempt)


def _name(group: bytes) -> str:
    return group.decode("utf-8", "backslashreplace")


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
        repaired=whole and outcome.action is not RepairAction.LOST_RACE,
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
