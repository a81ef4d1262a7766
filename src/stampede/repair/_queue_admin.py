"""Looking into a repair queue and tidying it: dead letters, delayed retries,
gauges (`RepairQueue`'s methods of the same names call these); and keeping a live
worker's jobs in hand from looking idle (`touch`, `keep_held`)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from .._lua import script
from ..errors import (
    InvalidKeyError,
    OutcomeUnknownError,
    ShardError,
    ShardResponseError,
    StampedeError,
)
from ._jobs import CONSUMER_GROUP, Job, as_text, beside, flatten

if TYPE_CHECKING:
    from ._queue import RepairQueue

__all__ = [
    "collect_markers",
    "dead_letter",
    "dead_letters",
    "delayed",
    "forget_consumers",
    "held_by",
    "keep_held",
    "publish",
    "requeued_key",
    "run_checked",
    "stats",
    "touch",
    "wrong_kind",
    "wrong_kind_among",
]

_TOUCH = script("queue_touch")


def wrong_kind(exc: ShardResponseError, key: bytes) -> StampedeError:
    """`exc`, or for a WRONGTYPE reply an `InvalidKeyError` naming the queue's key that
    holds another type (another program's key under the queue's name)."""
    if "WRONGTYPE" not in str(exc):
        return exc
    return InvalidKeyError(
        f"the repair queue's key {key!r} holds another type of value (another program's "
        "key?); give the queue another name (RepairQueue(name=...)), or delete that key",
        key=key,
    )


_TYPES = ("stream", "hash", "zset", "hash", "hash")
"""The type of each of a partition's keys, in `RepairQueue.side_keys` order."""


async def wrong_kind_among(
    queue: RepairQueue, exc: ShardResponseError, stream: bytes
) -> StampedeError:
    """`exc`, or for a WRONGTYPE reply to a call on a partition's keys (a script names
    no key in its error) the `wrong_kind` error of the first of them holding another
    type than the queue gives it."""
    if "WRONGTYPE" not in str(exc):
        return exc
    for key, kind in zip(queue.side_keys(stream), _TYPES, strict=True):
        held = as_text(await queue.topology.execute(key, "TYPE", key))
        if held not in (kind, "none"):
            return wrong_kind(exc, key)
    return wrong_kind(exc, stream)


async def run_checked(queue: RepairQueue, key: bytes, *args: Any) -> Any:
    """`key`'s command on its shard, a WRONGTYPE reply as `wrong_kind` says."""
    try:
        return await queue.topology.execute(key, *args)
    except ShardResponseError as exc:
        raise wrong_kind(exc, key) from exc


_DEAD = script("queue_dead")

_BURY = script("queue_bury")

_FORGET = script("queue_forget")

_HELD_BY = script("queue_held_by")

_COLLECT = script("queue_collect")


async def touch(queue: RepairQueue, consumer: str, jobs: Collection[Job]) -> int:
    """Reset the idle time of the `jobs` that `consumer` still holds; how many."""
    streams: dict[bytes, list[str]] = {}
    for job in jobs:
        streams.setdefault(job.stream, []).append(job.id)
    touched = 0
    for stream, ids in streams.items():
        reply = await queue.topology.script(_TOUCH, [stream], [CONSUMER_GROUP, consumer, *ids])
        touched += int(reply)
    return touched


async def keep_held(queue: RepairQueue, consumer: str, held: Callable[[], Collection[Job]]) -> None:
    """Touch the jobs in hand a few times per `min_idle`, for good: a job that runs
    longer than `min_idle` in a live worker is not taken over as a dead worker's."""
    interval = max(queue.min_idle_ms / 4000, 0.005)
    while True:
        await asyncio.sleep(interval)
        jobs = held()
        if jobs:
            try:
                await touch(queue, consumer, jobs)
            except StampedeError:  # a shard down: the next round tries again
                pass


async def dead_letter(
    queue: RepairQueue, job: Job, error: str, attempts: int | None, holder: str | None = None
) -> str | bool | None:
    """`RepairQueue.dead_letter`: False when the job is no longer pending (or, with
    `holder`, no longer held by that consumer), else the follow-up id.

    One Lua call on the partition's slot acks the job and parks its dead letter there
    (`queue_dead.lua`); publishing it to the dead-letter stream, in another slot, comes
    next and is idempotent. A worker that dies between the two leaves the dead letter
    parked, for the next claim (`promote`) to publish: never a job both dead-lettered
    and pending, taken over and dead-lettered twice."""
    fields = job.fields() if job.keys else {b"group": job.group, b"reason": b"malformed"}
    fields[b"attempts"] = str(attempts if attempts is not None else job.attempts).encode()
    fields[b"last_error"] = error[:500].encode("utf-8", "backslashreplace")
    fields[b"failed_at"] = repr(time.time()).encode()
    fields[b"source_id"] = job.id.encode()
    keys = [job.stream, queue.pending_key(job.stream), queue.dying_key(job.stream)]
    args = [CONSUMER_GROUP, job.id, job.group, holder or "", *flatten(fields)]
    reply = await queue.topology.script(_DEAD, keys, args)
    if not int(reply[0]):
        return False
    dying = queue.dying_key(job.stream)
    try:
        packed = await queue.topology.execute(dying, "HGET", dying, job.id)
        if packed is not None:
            await publish(queue, job.stream, [job.id.encode(), packed])
    except (ShardError, OutcomeUnknownError):  # parked: the next claim publishes it
        pass
    return None if len(reply) < 2 or reply[1] is None else as_text(reply[1])


REQUEUED_HOLD_MS = 600_000
"""How long the source of a requeued dead letter is kept from being published again: a
publish of its parked copy under way (read before the requeue) comes well within it."""


def requeued_key(queue: RepairQueue) -> bytes:
    """The sorted set of the requeued dead letters' sources, beside the dead letters."""
    return beside(queue.dead, b"requeued")


async def publish(queue: RepairQueue, stream: bytes, parked: Sequence[Any]) -> int:
    """Copy the dead letters parked in `stream`'s dying hash (`parked`: ids and packed
    fields alternating, or a dict, as HGETALL gives them) to the dead-letter stream, once
    each (`queue_bury.lua` remembers their sources), and delete them; how many were
    added. The stream keeps about `dead_max_len` entries, the newest (approximate
    trimming: a few more until a whole node of old ones can go).

    Call it as soon as `parked` was read: a copy read half of `REQUEUED_HOLD_MS` ago
    or more (a process paused, a long batch) is not published but left parked for
    the next claim, since a requeue of its dead letter meanwhile is forgotten then."""
    started = time.monotonic()
    dying = queue.dying_key(stream)
    if isinstance(parked, dict):
        pairs = list(parked.items())
    else:
        pairs = list(zip(parked[::2], parked[1::2], strict=True))
    added = 0
    for eid, packed in pairs:
        if time.monotonic() - started >= REQUEUED_HOLD_MS / 2000:
            break  # read too long ago: the next claim reads it afresh
        source = b"%s %s" % (eid if isinstance(eid, bytes) else str(eid).encode(), stream)
        keys = [queue.dead, queue.dead_sources, requeued_key(queue)]
        try:
            added += int(
                await queue.topology.script(_BURY, keys, [queue.dead_max_len, source, packed])
            )
        except ShardResponseError as exc:
            raise wrong_kind(exc, queue.dead) from exc
        await queue.topology.execute(dying, "HDEL", dying, eid, resend=True)  # idempotent
    return added


async def forget_consumers(queue: RepairQueue) -> int:
    """Delete the consumers, in every partition, that hold no job and were idle for
    `forget_after` (workers that are gone); how many. Each partition is checked and
    cleared in one Lua call, so a consumer that takes a job meanwhile is kept."""
    forgotten = 0
    for stream in queue.streams:
        args = [CONSUMER_GROUP, queue.forget_after_ms]
        forgotten += int(await queue.topology.script(_FORGET, [stream], args))
    return forgotten


async def collect_markers(queue: RepairQueue, page: int = 500) -> int:
    """Collect the markers, in every partition, that no longer stand for a job (their
    entry deleted by hand or trimmed, their retry gone from the delayed set: another
    program's doing), and put such retries on the stream; how many. A marker is
    deleted, or replaced by a job with the fields of the enqueues marked on it
    (`queue_collect.lua`). Workers do it at start and every minute, so a stray marker
    or retry is neither kept for ever nor lets down the enqueues it covered."""
    collected = 0
    for stream in queue.streams:
        keys = queue.side_keys(stream)[:4]
        for scanned in (queue.pending_key(stream), queue.retries_key(stream)):
            cursor = b"0"
            while True:
                cursor, flat = await run_checked(
                    queue, scanned, "HSCAN", scanned, cursor, "COUNT", page
                )
                if groups := flat[::2]:
                    try:
                        args = [CONSUMER_GROUP, *groups]
                        collected += int(await queue.topology.script(_COLLECT, keys, args))
                    except ShardResponseError as exc:
                        raise await wrong_kind_among(queue, exc, stream) from exc
                if cursor in (b"0", 0, "0"):
                    break
    return collected


async def held_by(queue: RepairQueue, consumer: str) -> int:
    """How many jobs `consumer` holds (claimed, not acked), over every partition."""
    held = 0
    for stream in queue.streams:
        held += int(await queue.topology.script(_HELD_BY, [stream], [CONSUMER_GROUP, consumer]))
    return held


async def dead_letters(queue: RepairQueue, count: int = 100) -> list[dict[str, str]]:
    """The newest dead-lettered jobs, fields as text."""
    reply = await run_checked(queue, queue.dead, "XREVRANGE", queue.dead, "+", "-", "COUNT", count)
    out = []
    for eid, raw in reply:
        fields = dict(zip(raw[::2], raw[1::2], strict=True)) if isinstance(raw, list) else raw
        item = {as_text(k): as_text(v) for k, v in fields.items()}
        item["id"] = as_text(eid)
        out.append(item)
    return out


async def delayed(queue: RepairQueue, count: int = 100) -> list[dict[str, Any]]:
    """Retries waiting for their delay, soonest first: their fields as text, plus
    `stream` and `due_at` (epoch seconds)."""
    out: list[dict[str, Any]] = []
    for stream in queue.streams:
        zkey, hkey = queue.delayed_key(stream), queue.retries_key(stream)
        due = await run_checked(queue, zkey, "ZRANGE", zkey, 0, count - 1, "WITHSCORES")
        for group, score in zip(due[::2], due[1::2], strict=True):
            raw = await run_checked(queue, hkey, "HGET", hkey, group)
            item: dict[str, Any] = _retry_fields(raw)
            item.setdefault("group", as_text(group))
            item["stream"] = as_text(stream)
            item["due_at"] = float(score) / 1000
            out.append(item)
    out.sort(key=lambda item: float(item["due_at"]))
    return out[:count]


def _retry_fields(raw: bytes | None) -> dict[str, Any]:
    """A waiting retry's fields (a JSON list, name and value alternating, as text);
    whatever another program wrote there that is not gives no fields."""
    try:
        flat = json.loads(raw) if raw is not None else []
    except (ValueError, TypeError, RecursionError):
        return {}
    if not isinstance(flat, list):
        return {}
    return {
        str(k): v if isinstance(v, str) else json.dumps(v)
        for k, v in zip(flat[::2], flat[1::2], strict=False)
    }


async def stats(queue: RepairQueue, *, detailed: bool = False) -> dict[str, int]:
    """Jobs queued (`length`: stream entries plus retries waiting for their delay),
    `pending` (claimed, not acked), `lag` (not yet delivered) and `dead` letters;
    `detailed` adds `delayed` (the retries waiting, counted in `length`)."""
    length = pending = lag = delayed = 0
    for stream in queue.streams:
        zkey = queue.delayed_key(stream)
        delayed += int(await run_checked(queue, zkey, "ZCARD", zkey))
        try:
            entries = int(await run_checked(queue, stream, "XLEN", stream))
            groups = await run_checked(queue, stream, "XINFO", "GROUPS", stream)
        except ShardResponseError:
            continue  # no stream yet
        length += entries
        for info in groups:
            fields = (
                dict(zip(info[::2], info[1::2], strict=True)) if isinstance(info, list) else info
            )
            if as_text(fields.get(b"name", b"")) == CONSUMER_GROUP.decode():
                held = int(fields.get(b"pending", 0) or 0)
                pending += held
                # Redis gives a null lag when a deleted entry lies at or past the group's
                # last-delivered id (jobs acked out of order): as every acked job's entry
                # is deleted, the entries not pending are the undelivered ones.
                raw = fields.get(b"lag")
                lag += int(raw) if raw is not None else max(0, entries - held)
    dead = int(await run_checked(queue, queue.dead, "XLEN", queue.dead))
    for stream in queue.streams:  # decided, not yet published
        dying = queue.dying_key(stream)
        dead += int(await run_checked(queue, dying, "HLEN", dying))
    out = {"length": length + delayed, "pending": pending, "lag": lag, "dead": dead}
    if detailed:
        out["delayed"] = delayed
    return out
