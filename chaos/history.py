"""A history of operations, as JSON lines: what was asked, what came back, and when.

Every operation is two events sharing an `op` id: an `invoke` and a completion
(`ok`, `fail` or `unknown`); faults are single `fault` events. Timestamps are
`time.monotonic()` seconds, which on Linux is one clock for every process of the
machine, so the histories of a worker subprocess merge with the runner's.

```
{"t": 3.10, "type": "invoke", "op": "w1.0:7", "f": "write", "proc": "w1.0",
 "group": "chaos:c0", "mode": "commit", "keys": [...], "values": {key: payload}}
{"t": 3.12, "type": "ok", "op": "w1.0:7", "f": "write", "version": 7, "token": "01J...",
 "superseded": []}
{"t": 3.12, "type": "unknown", "op": "w1.0:8", "f": "write", "error": "InjectedCrash",
 "crash": "between-shards", "sent": [keys handed to the servers], "version": 8, "token": ...}
{"t": 3.20, "type": "ok", "op": "r1:3", "f": "read", "status": "consistent",
 "values": {key: payload | null}, "version": ..., "token": ..., "repaired": false, ...}
{"t": 3.30, "type": "invoke", "op": "r1:4", "f": "repair", "parent": "r1:3",
 "began": 3.25, "seen": {key: [stamp, payload] | null}, "record": stamp | null}
{"t": 3.40, "type": "fault", "op": "fault:2", "kind": "kill", "shard": "127.0.0.1:7001",
 "keys": [keys that lived on it]}
```

Payloads name the write that made them: `<writer>:<seq>:<key>` (`payload_of`), so
a checker can tell which write each value came from without trusting stamps.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CURRENT_OP",
    "Event",
    "History",
    "OpContext",
    "WriteId",
    "load_events",
    "parse_payload",
    "payload_of",
    "text",
]

Event = dict[str, Any]

WriteId = str  # "<writer>:<seq>"


def text(value: bytes | str) -> str:
    """Bytes as JSON-ready text (keys and payloads of the workload are ASCII)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def payload_of(writer: str, seq: int, key: bytes | str) -> bytes:
    """The payload write `writer:seq` stores at `key`: it names its write and its key."""
    if ":" in writer:
        raise ValueError(f"writer names may not contain ':' (got {writer!r})")
    return f"{writer}:{seq}:{text(key)}".encode()


def parse_payload(payload: bytes | str | None) -> tuple[WriteId, str] | None:
    """(write id, key) from a payload made by `payload_of`; None for anything else."""
    if payload is None:
        return None
    parts = text(payload).split(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
        return None
    return f"{parts[0]}:{parts[1]}", parts[2]


@dataclass
class OpContext:
    """What the fault-injecting topology learns about the operation running in this task.

    `RecordingStampede` sets it (through `CURRENT_OP`) around each call;
    `FaultyTopology` fills in the write's stamp, the keys it handed to the servers
    and the crash it injected, which the completion event then records.
    """

    op: str
    f: str
    group: bytes
    mode: str
    began: float
    sent: set[bytes] = field(default_factory=set)
    version: int | None = None
    token: str | None = None
    crash: str | None = None
    app_version: int | None = None  # the version the application passed (`version=`)
    decided: bool = False
    planned: Any = None  # the fault-injecting topology's plan for this write


CURRENT_OP: contextvars.ContextVar[OpContext | None] = contextvars.ContextVar(
    "stampede_chaos_op", default=None
)


class History:
    """Events in memory and, when `path` is given, appended to a JSON-lines file.

    Each event is one `write()` of one line to a file opened with O_APPEND, so a
    process killed mid-run leaves at most its last line cut short (`load_events`
    skips it).
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.events: list[Event] = []
        self.path = None if path is None else Path(path)
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def next_op(self, process: str) -> str:
        """A fresh operation id, unique within this history's process."""
        return f"{process}:{next(self._ids)}"

    def record(self, event_type: str, op: str, **fields: Any) -> Event:
        """Append one event stamped with the monotonic clock; returns it."""
        event: Event = {"t": time.monotonic(), "type": event_type, "op": op, **fields}
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        with self._lock:
            self.events.append(event)
            if self._fd is not None:
                os.write(self._fd, line)
        return event

    def fault(self, kind: str, **fields: Any) -> Event:
        """Record one injected fault (kill, restart, pause, resume, migrate, ...)."""
        return self.record("fault", self.next_op("fault"), kind=kind, **fields)

    def extend(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Merge events recorded elsewhere (a worker subprocess), kept in time order."""
        with self._lock:
            self.events.extend(dict(e) for e in events)
            self.events.sort(key=lambda e: float(e["t"]))

    def dump(self, path: Path | str) -> None:
        """Write every event in memory to `path` as JSON lines (time order)."""
        with Path(path).open("w", encoding="utf-8") as out:
            for event in sorted(self.events, key=lambda e: float(e["t"])):
                out.write(json.dumps(event, sort_keys=True) + "\n")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


def load_events(path: Path | str) -> list[Event]:
    """Events of a JSON-lines file in time order; a line cut short by a kill is skipped."""
    events: list[Event] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return events
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the last line of a process killed while writing it
        if isinstance(event, dict) and "t" in event and "type" in event and "op" in event:
            events.append(event)
    events.sort(key=lambda e: float(e["t"]))
    return events
