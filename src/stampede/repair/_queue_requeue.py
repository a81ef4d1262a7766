"""Putting dead letters back on the queue (`RepairQueue.requeue_dead`, `stampede queue
requeue`): each as a new job, its dead letter deleted, and with it its parked copy
and, after the batch, the sources of the dead letters gone."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._lua import script
from ..errors import ConfigurationError, ShardResponseError
from ._jobs import as_text
from ._queue_admin import REQUEUED_HOLD_MS, requeued_key, run_checked, wrong_kind

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = ["check_entry_id", "requeue_dead"]

_SOURCES = script("queue_sources")

_REQUEUED = script("queue_requeued")


_ENTRY_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")


def check_entry_id(eid: str) -> str:
    """`eid` if it is a stream entry id (`<ms>-<seq>` or `<ms>`), else ConfigurationError
    naming it: the server's refusal named neither the id nor what to give instead."""
    found = _ENTRY_ID.fullmatch(eid)
    if found is None or any(int(part or 0) >= 2**64 for part in found.groups()):
        raise ConfigurationError(
            f"{eid!r} is not a dead letter id: give one as `stampede queue dead` lists "
            "them (<ms>-<seq>, e.g. 1700000000000-0)"
        )
    return eid


async def requeue_dead(
    queue: RepairQueue, ids: Sequence[str] | None = None, *, count: int = 1000
) -> list[dict[str, str]]:
    """Put dead letters back on the queue as new jobs (attempts 0) and delete them.

    `ids` picks dead letters by id; None takes the oldest `count` that can be requeued
    (the malformed ones on the way are reported and kept). Each result
    has `id`, `group` and `outcome`: `queued` (with the new `job` id),
    `pending` (the group already has a job, which covers it), `malformed` (no
    keys to repair: kept) or `missing` (no dead letter with that id).
    """
    if ids is None:
        return await _requeue_oldest(queue, count)
    for eid in ids:  # every id checked before anything is requeued
        check_entry_id(eid)
    out: list[dict[str, str]] = []
    for eid in ids:
        found = await run_checked(queue, queue.dead, "XRANGE", queue.dead, eid, eid)
        for entry_id, raw in found or [(eid.encode(), None)]:
            out.append(await _requeue_one(queue, entry_id, raw))
    await _forget_sources(queue, out)
    return out


async def _requeue_oldest(queue: RepairQueue, count: int) -> list[dict[str, str]]:
    """Requeue the oldest `count` dead letters that can be, reporting the malformed ones
    on the way (kept): `count` of them no longer stop it from reaching the rest."""
    out: list[dict[str, str]] = []
    start, requeued = "-", 0
    while requeued < count:
        page = await run_checked(
            queue,
            queue.dead,
            "XRANGE",
            queue.dead,
            start,
            "+",
            "COUNT",
            min(count - requeued, 1000),
        )
        if not page:
            break
        for eid, raw in page:
            item = await _requeue_one(queue, eid, raw)
            out.append(item)
            requeued += item["outcome"] != "malformed"
        start = "(" + as_text(page[-1][0])
    await _forget_sources(queue, out)
    return out


async def _forget_sources(queue: RepairQueue, results: Sequence[dict[str, str]]) -> None:
    """After requeueing: the sources of dead letters no longer there go with them."""
    if any(item["outcome"] in ("queued", "pending") for item in results):
        keys = [queue.dead, queue.dead_sources]
        await queue.topology.script(_SOURCES, keys, [queue.dead_max_len])


async def _requeue_one(queue: RepairQueue, eid: Any, raw: Any) -> dict[str, str]:
    """Requeue one dead letter (`raw`: its fields, None when there is none) and delete it;
    its result as `requeue_dead` gives it."""
    if raw is None:
        return {"id": as_text(eid), "group": "", "outcome": "missing"}
    fields = dict(zip(raw[::2], raw[1::2], strict=True)) if isinstance(raw, list) else raw
    group = fields.get(b"group", b"")
    item = {"id": as_text(eid), "group": group.decode("utf-8", "backslashreplace")}
    keys, seen = _requeueable(fields)
    if not group or not keys or seen is None:
        return {**item, "outcome": "malformed"}
    mode = as_text(fields[b"mode"]) if b"mode" in fields else None
    job = await queue.enqueue(
        group,
        [k.encode("utf-8", "surrogateescape") for k in keys],
        seen,
        as_text(fields.get(b"reason", b"torn")),
        mode=mode,
    )
    source = fields.get(b"source_id")
    await _unpark(queue, group, source)
    # The dead letter goes, and its source is held off a publish already under way.
    stream = queue.stream_for(group)
    args = [eid, b"%s %s" % (source, stream) if source else b"", REQUEUED_HOLD_MS]
    try:
        await queue.topology.script(_REQUEUED, [queue.dead, requeued_key(queue)], args)
    except ShardResponseError as exc:
        raise wrong_kind(exc, queue.dead) from exc
    if job is None:
        return {**item, "outcome": "pending"}
    return {**item, "outcome": "queued", "job": job}


async def _unpark(queue: RepairQueue, group: bytes, source: bytes | None) -> None:
    """Delete the parked copy (dying hash) of the dead letter of job `source`, if one is
    left: its worker died after publishing it, before deleting it. Requeued without
    it, the copy is published again by the next claim (the requeue's trim takes its
    source), and the job is both queued anew and a dead letter."""
    if source:
        dying = queue.dying_key(queue.stream_for(group))
        try:  # (HDEL: safe to send again after a lost reply)
            await queue.topology.execute(dying, "HDEL", dying, source, resend=True)
        except ShardResponseError as exc:
            raise wrong_kind(exc, dying) from exc


def _requeueable(
    fields: dict[bytes, bytes],
) -> tuple[list[str] | None, dict[str, str | None] | None]:
    """A dead letter's keys (a non-empty JSON list of strings) and seen (a JSON object
    of strings or nulls), or None for either when malformed (another program wrote it)."""
    try:
        keys = json.loads(fields[b"keys"])
        seen = json.loads(fields.get(b"seen", b"{}"))
    except (KeyError, ValueError, TypeError, RecursionError):
        return None, None
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        return None, None
    if not isinstance(seen, dict) or not all(
        v is None or isinstance(v, str) for v in seen.values()
    ):
        return keys, None
    return keys, seen
