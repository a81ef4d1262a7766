"""What the demo counts while it runs, and the summary it ends with."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter as Tally
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from stampede.results import ReadResult, RepairAction
from stampede.verdict import Status

__all__ = ["STRATEGIES", "Counters", "Section", "Summary", "worker_events"]

STRATEGIES = ("newest-wins", "refetch", "enqueue")
_WHY = {
    "torn": "tokens differ",
    "partial": "a key is missing",
    "uncommitted": "no commit record",
    "unstamped": "a value is not stamped",
}


@dataclass
class Counters:
    """Live counters, shared by the writers, readers, fault injectors and the display."""

    writes: int = 0
    writes_failed: int = 0  # a shard failed mid-write (paused or down): partial writes
    crashes: int = 0  # writers "killed" between shards by the fault injector
    pauses: int = 0
    reads: int = 0
    consistent: int = 0  # whole at the first attempt
    retried: int = 0  # in flight at first, whole after retrying
    not_found: int = 0
    torn: int = 0  # still torn after the retries: handed to the repair strategy
    read_errors: int = 0  # a shard did not answer (paused); counted in `reads` too
    repairs: Tally[str] = field(default_factory=Tally)  # strategy -> groups made whole
    queued: int = 0  # torn groups handed to the worker: jobs put on the repair stream
    already_queued: int = 0  # torn reads of a group whose job was still pending
    lost_races: int = 0  # a newer write beat the repair (the newer write is kept)
    events: deque[str] = field(default_factory=lambda: deque(maxlen=8))

    def note(self, line: str) -> None:
        """Remember one line for the live event log."""
        self.events.append(line)

    def count_failed_read(self, group: str, error: BaseException) -> None:
        """Tally a read that failed (a shard did not answer)."""
        self.reads += 1
        self.read_errors += 1
        self.note(f"read failed: {group}: {type(error).__name__}")

    def count_read(self, strategy: str, result: ReadResult[str]) -> None:
        """Tally one read by what the reader saw and what its repair did."""
        self.reads += 1
        outcome = result.repair
        if outcome is None:
            if result.status is Status.NOT_FOUND:
                self.not_found += 1
            elif result.attempts > 1:
                self.retried += 1
            else:
                self.consistent += 1
            return
        self.torn += 1
        why = _WHY.get(result.reason.value if result.reason is not None else "", "torn")
        seen = f"{result.group.decode()} torn ({why}):"
        if outcome.action is RepairAction.QUEUED and outcome.detail.get("job") == "already pending":
            self.already_queued += 1
        elif outcome.action is RepairAction.QUEUED:
            self.queued += 1
            self.note(f"{seen} queued for the worker")
        elif outcome.action is RepairAction.LOST_RACE:
            self.lost_races += 1
            self.note(f"{seen} a newer write won the race, kept")
        else:
            self.repairs[strategy] += 1
            self.note(f"{seen} {outcome.action.value.replace('_', ' ')} by {strategy}")


Section = tuple[str, int, list[tuple[str, int]]]
"""A summary row: its label, its total, and the (label, count) parts that add up to it."""


@dataclass
class Summary:
    """The end of a demo run; `ok` (exit status 0) only when no torn group is left."""

    topology: str
    servers: list[str]
    local: bool
    mode: str
    size: int
    duration: float
    fault_rate: float
    strategies: list[str]
    counters: Counters
    worker: dict[str, int]
    scan: dict[str, int]
    torn_left: int
    seconds: float
    left_groups: list[str] = field(default_factory=list)
    removed: int | None = None  # keys deleted at the end (on servers the demo does not own)

    @property
    def ok(self) -> bool:
        return self.torn_left == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def as_dict(self) -> dict[str, Any]:
        """The JSON-ready summary (`stampede demo --json`)."""
        c = self.counters
        repairs = {name: c.repairs.get(name, 0) for name in ("newest-wins", "refetch")}
        return {
            "ok": self.ok,
            "topology": self.topology,
            "servers": self.servers,
            "local_servers": self.local,
            "mode": self.mode,
            "size": self.size,
            "duration": self.duration,
            "fault_rate": self.fault_rate,
            "strategies": self.strategies,
            "writes": c.writes,
            "writes_failed": c.writes_failed,
            "crashes_injected": c.crashes,
            "pauses_injected": c.pauses,
            "reads": {
                "total": c.reads,
                "consistent": c.consistent,
                "retried": c.retried,
                "not_found": c.not_found,
                "torn_detected": c.torn,
                "errors": c.read_errors,
            },
            "repairs": {
                **repairs,
                "enqueued": c.queued,
                "already_queued": c.already_queued,
                "worker": self.worker.get("repaired", 0) + self.worker.get("rolled_forward", 0),
                "lost_races": c.lost_races,
            },
            "worker": self.worker,
            "scan": self.scan,
            "torn_left": self.torn_left,
            "torn_left_groups": self.left_groups,
            "keys_removed": self.removed,
            "seconds": round(self.seconds, 3),
        }

    def sections(self) -> list[Section]:
        """The summary as rows, each with the parts that add up to it (the table)."""
        c, w, scan = self.counters, self.worker, self.scan
        inline = {name: c.repairs.get(name, 0) for name in ("newest-wins", "refetch")}
        other_inline = sum(c.repairs.values()) - sum(inline.values())
        torn = [
            ("repaired inline by newest-wins", inline["newest-wins"]),
            ("repaired inline by refetch (from the database)", inline["refetch"]),
            ("queued for the worker (enqueue)", c.queued),
            ("already queued (its job was still pending)", c.already_queued),
            ("lost to a newer write (kept)", c.lost_races),
        ] + ([("repaired inline by another strategy", other_inline)] if other_inline else [])
        named = ("repaired", "rolled_forward", "deleted", "already_consistent")
        jobs = [
            ("rewritten or rolled forward", w.get("repaired", 0) + w.get("rolled_forward", 0)),
            ("deleted (gone from the database)", w.get("deleted", 0)),
            ("already consistent", w.get("already_consistent", 0)),
            ("other (a newer write won)", w.get("done", 0) - sum(w.get(n, 0) for n in named)),
        ]
        groups = [
            ("consistent", scan.get("consistent", 0)),
            ("not found", scan.get("not_found", 0)),
            ("torn", self.torn_left),
        ]
        return [
            ("writes acknowledged", c.writes, []),
            ("partial writes (a shard did not answer)", c.writes_failed, []),
            ("crashes injected (writer died between shards)", c.crashes, []),
            ("primaries paused", c.pauses, []),
            (
                "reads",
                c.reads,
                [
                    ("consistent at once", c.consistent),
                    ("in flight, consistent after retrying", c.retried),
                    ("not found", c.not_found),
                    ("torn detected (handed to repair)", c.torn),
                    ("failed (shard paused)", c.read_errors),
                ],
            ),
            ("torn reads, by what their repair did", c.torn, torn),
            ("jobs done by the worker", w.get("done", 0), jobs),
            (f"groups scanned at the end ({self.topology})", scan.get("groups", 0), groups),
        ]


@contextlib.contextmanager
def worker_events(counters: Counters) -> Iterator[None]:
    """Show the worker's job events in the demo's event log while the demo runs."""
    logger = logging.getLogger("stampede.worker")
    handler = _WorkerLog(counters)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class _WorkerLog(logging.Handler):
    def __init__(self, counters: Counters) -> None:
        super().__init__(logging.INFO)
        self.counters = counters

    def emit(self, record: logging.LogRecord) -> None:
        # The worker logs structured events: the fields are attributes of the record.
        fields = vars(record)
        name, group = str(fields.get("event", "")), str(fields.get("group", ""))
        action = fields.get("action")
        if name == "job.done" and action in ("rewritten", "rolled_forward"):
            self.counters.note(f"worker: {group} {action} (refetch from the database)")
        elif name in ("job.failed", "job.dead_lettered"):
            self.counters.note(f"worker: {name} {group}: {fields.get('error', '')}"[:120])
