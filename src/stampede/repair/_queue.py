"""`RepairQueue`: repair jobs on Redis Streams, delivered at least once.

```
stream        stampede:repairs            (one partition)
              stampede:repairs:{<n>}      (n = 0..partitions-1; the default on a cluster)
consumers     group "stampede-repair"
entry fields  group, keys (JSON), seen (JSON), reason, enqueued_at, plus stampede's
              own mode, attempts, waited and, after a failure, last_error
beside each   {stampede:repairs}:pending (hash: group -> marker), :delayed (sorted
stream        set: group -> due ms), :retries (hash: group -> a retry's fields),
              :dying (hash: entry id -> a dead letter not yet on the dead stream),
              :receipt:<token> (a retry's or hand-back's result; expires in 10 min)
dead letters  stampede:repairs:dead       (entry fields plus last_error, failed_at)
              {stampede:repairs:dead}:sources (one dead letter per job), :requeued
```

A group's partition is its slot modulo the partition count; its pending marker
is in the slot of its stream, so "one pending job per group" is checked and recorded
in the Lua call of the XADD. A dead worker's jobs are taken over once idle long
enough; a job that fails (or whose worker died) `max_attempts` times is dead-lettered.
A retry (`fail`, `postpone`) waits its delay in the delayed set (marker
`0-<due_ms>:<ms>`), until a `claim` promotes it back onto the stream.

The marker is `<id>:<enqueued_ms>`, or `<id>:<enqueued_ms>:<n>:<fields>` once `n`
enqueues found the job already taken: its ack adds `<fields>` as a new job, so every
caller told "already pending" gets a repair that reads the group after its enqueue
(docs/wire-formats.md has every rule).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._lua import script
from ..errors import ConfigurationError, ShardResponseError, StampedeError
from ..keys import keyslot, to_bytes
from ..options import check_count
from ..typing import Topology
from . import _queue_admin as _admin
from . import _queue_claim as _claim
from . import _queue_fail as _fail
from . import _queue_requeue as _requeue
from ._jobs import (
    BASE,
    CONSUMER_GROUP,
    DEAD,
    HANDED_BACK,
    Job,
    as_text,
    beside,
    check_consumer,
    check_job,
    encode_fields,
    flatten,
    holder_arg,
    receipt_key,
)
from ._settings import check_queue

__all__ = ["CONSUMER_GROUP", "DEAD", "Job", "RepairQueue"]


_ENQUEUE = script("queue_enqueue")
_ACK = script("queue_ack")
_PROMOTE = script("queue_promote")
_RELEASE = script("queue_release")


class RepairQueue:
    """Repair jobs on one or more Redis Streams, with a consumer group and dead letters."""

    def __init__(
        self,
        topology: Topology,
        *,
        name: bytes | str = BASE,
        partitions: int | None = None,
        max_attempts: int = 5,
        min_idle: float = 30.0,
        marker_ttl: float = 3600.0,
        dead_max_len: int = 10_000,
        forget_after: float = 3600.0,
    ) -> None:
        if partitions is None:
            # Slot-bound: one stream per slot would be one hot node; spread over eight.
            partitions = 8 if topology.slot_bound else 1
        self.partitions = check_count(partitions, "partitions", 1, 1024)
        self.min_idle_ms, self.marker_ttl_ms = check_queue(
            min_idle, max_attempts, marker_ttl, dead_max_len, forget_after
        )
        self.dead_max_len = dead_max_len
        self.forget_after_ms = int(min(forget_after, 10**10) * 1000)
        self.topology = topology
        self.max_attempts = max_attempts
        base = to_bytes(name)
        if not base:
            raise ConfigurationError("the repair stream name is empty")
        self.name = base
        self.dead = base + b":dead"
        self.dead_sources = self._beside(self.dead, b"sources")  # one dead letter per job
        self.streams = (
            [base] if partitions == 1 else [b"%s:{%d}" % (base, n) for n in range(partitions)]
        )
        self._ready: set[bytes] = set()
        self.cursors: dict[bytes, bytes] = {}  # per stream: where `reclaim` goes on
        self._turn = -1

    def __repr__(self) -> str:
        return (
            f"RepairQueue(name={self.name!r}, partitions={self.partitions}, "
            f"max_attempts={self.max_attempts})"
        )

    @staticmethod
    def pending_key(stream: bytes) -> bytes:
        """The hash of pending groups for `stream`, in the stream's slot."""
        return RepairQueue._beside(stream, b"pending")

    @staticmethod
    def delayed_key(stream: bytes) -> bytes:
        """The sorted set of retries waiting for their delay (group -> due ms)."""
        return RepairQueue._beside(stream, b"delayed")

    @staticmethod
    def retries_key(stream: bytes) -> bytes:
        """The hash of the waiting retries' entry fields (group -> JSON)."""
        return RepairQueue._beside(stream, b"retries")

    @staticmethod
    def dying_key(stream: bytes) -> bytes:
        """The hash of dead letters decided, not yet on the dead-letter stream (id -> JSON)."""
        return RepairQueue._beside(stream, b"dying")

    @staticmethod
    def _beside(stream: bytes, suffix: bytes) -> bytes:
        return beside(stream, suffix)

    def side_keys(self, stream: bytes) -> list[bytes]:
        """stream, marker hash, delayed set, retries hash, dying hash: one slot, in
        script order."""
        return [
            stream,
            self.pending_key(stream),
            self.delayed_key(stream),
            self.retries_key(stream),
            self.dying_key(stream),
        ]

    def stream_for(self, group: bytes) -> bytes:
        return self.streams[keyslot(group) % self.partitions]

    async def _ensure(self, stream: bytes) -> None:
        if stream in self._ready:
            return
        try:
            create = ("XGROUP", "CREATE", stream, CONSUMER_GROUP, "0", "MKSTREAM")
            await self.topology.execute(stream, *create, resend=True)  # again: BUSYGROUP
        except ShardResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise _admin.wrong_kind(exc, stream) from exc
        self._ready.add(stream)

    async def _call(self, stream: bytes, fn: Any) -> Any:
        """Run `fn()`, recreating the consumer group once if the node lost it; a
        WRONGTYPE reply is an InvalidKeyError naming the key of another type."""
        await self._ensure(stream)
        try:
            try:
                return await fn()
            except ShardResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self._ready.discard(stream)
                await self._ensure(stream)
                return await fn()
        except ShardResponseError as exc:
            raise await _admin.wrong_kind_among(self, exc, stream) from exc

    async def enqueue(
        self,
        group: bytes | str,
        keys: Sequence[bytes | str],
        seen: Mapping[str, str | None],
        reason: str,
        *,
        mode: str | None = None,
    ) -> str | None:
        """Queue a repair of `group`; None when a job for it is already pending.

        None still promises a repair that reads the group after this call: the
        pending job, if no worker has taken it yet, or else a follow-up job that
        its ack adds with these fields. `mode` ("stamp" or "commit") tells the
        worker how the group is read.
        """
        gkey, listed = check_job(group, keys, mode)
        stream = self.stream_for(gkey)
        now = time.time()
        fields = encode_fields(gkey, listed, seen, reason, now, 0, mode)
        args = [gkey, int(now * 1000), self.marker_ttl_ms, CONSUMER_GROUP, *flatten(fields)]
        job_id = await self._call(
            stream,
            lambda: self.topology.script(_ENQUEUE, self.side_keys(stream), args),
        )
        return None if job_id is None else as_text(job_id)

    async def claim(
        self,
        consumer: str,
        count: int = 16,
        *,
        block_ms: int = 0,
        in_hand: Collection[str] = (),
    ) -> list[Job]:
        """New jobs for `consumer`, then jobs idle past `min_idle` from dead consumers.

        No job comes twice, nor one whose id is in `in_hand` (the jobs the caller holds:
        one of them idle past `min_idle` is still its own). `block_ms` blocks on a
        single-partition queue only (keep it below the socket timeout); partitioned
        queues are polled, the caller sleeping between. A partition that fails is
        passed over: the first error is raised only when no job came from the others.
        """
        check_consumer(consumer)
        jobs: list[Job] = []
        failed: list[StampedeError | None] = []
        try:
            await self.promote()
        except StampedeError as exc:  # (a shard down) the other partitions' jobs still come
            failed.append(exc)
        block = block_ms if self.partitions == 1 else 0
        failed.append(
            await _claim.each_partition(
                self._in_turn(),
                self._call,
                lambda s, w: _claim.read_new(self, s, consumer, w, block, {*in_hand, *_ids(jobs)}),
                count,
                jobs,
            )
        )
        try:
            if len(jobs) < count:
                held = {*in_hand, *_ids(jobs)}
                jobs.extend(await self.reclaim(consumer, count - len(jobs), in_hand=held))
        except StampedeError as exc:
            failed.append(exc)
        if not jobs and (first := next((e for e in failed if e is not None), None)):
            raise first
        return jobs

    async def promote(self, limit: int = 1000) -> int:
        """Put the retries whose delay is over back on the stream, and publish the dead
        letters parked past `min_idle` (their worker died first); how many retries.
        A partition that fails is passed over, its error raised after the others."""
        added, failed = 0, None  # due by the server's clock, the one `fail` set it by
        for stream in self.streams:
            try:
                moved, dying = await self._call(
                    stream,
                    lambda s=stream: self.topology.script(
                        _PROMOTE, self.side_keys(s), [self.min_idle_ms, limit]
                    ),
                )
                added += int(moved)
                if dying:
                    await _admin.publish(self, stream, dying)
            except StampedeError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        return added

    async def reclaim(
        self, consumer: str, count: int, *, in_hand: Collection[str] = ()
    ) -> list[Job]:
        """Take over jobs idle past `min_idle` (their worker died) for `consumer`,
        never one whose id is in `in_hand`. Each partition's pending list is walked
        from where the last call left off, a bounded stretch per call. A partition that
        fails is passed over, as in `claim`."""
        check_consumer(consumer)
        jobs: list[Job] = []
        failed = await _claim.each_partition(
            self._in_turn(),
            self._call,
            lambda s, w: _claim.reclaim(self, s, consumer, w, in_hand),
            count,
            jobs,
        )
        if failed is not None and not jobs:
            raise failed
        return jobs

    def _in_turn(self) -> list[bytes]:
        """The partitions, from the next one in turn: a claim that fills up from the
        first partitions it reads leaves the others to the next claims, not for ever."""
        self._turn = (self._turn + 1) % self.partitions
        return self.streams[self._turn :] + self.streams[: self._turn]

    async def release(self, job: Job, holder: str | None = None) -> bool:
        """Hand a claimed job back: idle enough for any worker to take at once, its
        delivery count as before the claim (a stop does not count toward the dead
        letters). With `holder`, only while that consumer holds it; False if not."""
        args = [CONSUMER_GROUP, job.id, self.min_idle_ms + 1, holder_arg(holder), HANDED_BACK]
        keys = [job.stream, receipt_key(job.stream)]  # resent after a lost reply
        return bool(await self.topology.script(_RELEASE, keys, args))

    async def ack(self, job: Job) -> str | None:
        """The job is done: remove it and its pending marker.

        If the group was enqueued again after a worker took the job, a follow-up
        job replaces it (those enqueues were told the group is pending, and the
        job's read may predate what they saw): its id is returned, else None.
        """
        follow_up = await self.topology.script(
            _ACK, [job.stream, self.pending_key(job.stream)], [CONSUMER_GROUP, job.id, job.group, 0]
        )
        return None if follow_up is None else as_text(follow_up)

    async def fail(
        self, job: Job, error: str, *, delay: float = 0.0, holder: str | None = None
    ) -> bool | None:
        """Record a failed attempt: True when the job went to the dead letters, False
        when it is retried, None when nothing was done (the job is no longer pending,
        or with `holder` no longer that consumer's: another worker took it over).

        A retry comes at once when `delay` is 0, else waits `delay` seconds in the
        delayed set. Its fields add `delays` (every delay so far, seconds) and
        `retry_at` (when it becomes claimable, epoch seconds, the server's clock)."""
        return await _fail.fail(self, job, error, delay, holder_arg(holder) or None)

    async def postpone(
        self, job: Job, why: str, *, delay: float, holder: str | None = None
    ) -> bool | None:
        """Put the job off for `delay` seconds without counting an attempt (it waits, it
        did not fail: a transaction is still committing at its keys). Its `waited`
        field adds `delay`, so the caller can bound the waiting. True when put off,
        None when nothing was done (as `fail`)."""
        return await _fail.postpone(self, job, why, delay, holder_arg(holder) or None)

    async def dead_letter(
        self, job: Job, error: str, attempts: int | None = None, *, holder: str | None = None
    ) -> str | None:
        """Ack the job and move it to `stampede:repairs:dead` with its last error.

        Returns the id of the follow-up job the ack added, if any (see `ack`). A job
        no longer pending (a worker that took it over acked or retried it), or with
        `holder` no longer held by that consumer, is left alone: no dead letter.
        """
        done = await _admin.dead_letter(self, job, error, attempts, holder_arg(holder) or None)
        return done if isinstance(done, str) else None

    async def forget_consumers(self) -> int:
        """Delete the consumers holding no job and idle for `forget_after` seconds (workers
        that are gone); how many. Workers do it at start and every minute."""
        return await _admin.forget_consumers(self)

    async def dead_letters(self, count: int = 100) -> list[dict[str, str]]:
        """The newest dead-lettered jobs, fields as text."""
        return await _admin.dead_letters(self, count)

    async def requeue_dead(
        self, ids: Sequence[str] | None = None, *, count: int = 1000
    ) -> list[dict[str, str]]:
        """Put dead letters back on the queue as new jobs (attempts 0) and delete them.

        `ids` picks dead letters by id; None takes the oldest `count` that can be
        requeued (the malformed ones on the way are reported, kept). Each result
        has `id`, `group` and `outcome`: `queued` (with the new `job` id),
        `pending` (the group already has a job, which covers it), `malformed` (no
        keys to repair: kept) or `missing` (no dead letter with that id).
        """
        return await _requeue.requeue_dead(self, ids, count=count)

    async def delayed(self, count: int = 100) -> list[dict[str, Any]]:
        """Retries waiting for their delay, soonest first: their fields as text, plus
        `stream` and `due_at` (epoch seconds)."""
        return await _admin.delayed(self, count)

    async def stats(self, *, detailed: bool = False) -> dict[str, int]:
        """Jobs queued (`length`: stream entries plus retries waiting for their delay),
        `pending` (claimed, not acked), `lag` (not yet delivered) and `dead` letters;
        `detailed` adds `delayed` (the retries waiting, counted in `length`)."""
        return await _admin.stats(self, detailed=detailed)

    async def clear(self) -> None:
        """Delete every stream, marker and dead letter of this queue (tests, demos)."""
        keys = [k for s in self.streams for k in self.side_keys(s)]
        keys += [self.dead, self.dead_sources, _admin.requeued_key(self)]
        await asyncio.gather(*(self.topology.execute(k, "DEL", k) for k in keys))
        self._ready.clear()


def _ids(jobs: list[Job]) -> set[str]:
    return {job.id for job in jobs}
