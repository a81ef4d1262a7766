"""A repair job as stored on the stream: its fields, encoded and parsed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, InvalidKeyError
from ..keys import hash_tag, to_bytes

__all__ = [
    "BASE",
    "CONSUMER_GROUP",
    "DEAD",
    "HANDED_BACK",
    "Job",
    "as_text",
    "beside",
    "check_consumer",
    "check_job",
    "encode_fields",
    "flatten",
    "holder_arg",
    "parse_delays",
    "parse_job",
    "receipt_key",
]

CONSUMER_GROUP = b"stampede-repair"
BASE = b"stampede:repairs"
DEAD = b"stampede:repairs:dead"
HANDED_BACK = "released"
"""The consumer that holds a job handed back (`RepairQueue.release`) until a worker takes
it over: a name of the queue's own bookkeeping, which no worker may take."""


def beside(stream: bytes, suffix: bytes) -> bytes:
    """The key `suffix` of the queue kept beside `stream`, in its slot."""
    if hash_tag(stream) is None:
        return b"{%s}:%s" % (stream, suffix)
    return b"%s:%s" % (stream, suffix)


def receipt_key(stream: bytes) -> bytes:
    """A new receipt key beside `stream` (`queue_receipt.lua`): one per call of a script
    that keeps one, the same on its resends, so a resend finds what its first run did."""
    return beside(stream, b"receipt:" + os.urandom(12).hex().encode())


def check_consumer(consumer: object, what: str = "consumer name") -> str:
    """`consumer` if a worker may go by that name, else ConfigurationError naming it: an
    empty name, one that is not text, or `HANDED_BACK` (a worker of that name counted
    every hand-back as its own, and after a claim whose reply was lost took them in
    hand while another worker took them over: one job run twice)."""
    if not isinstance(consumer, str) or not consumer:
        raise ConfigurationError(
            f"the worker's {what} must be non-empty text, got {consumer!r}: give "
            "each worker its own name, or none for <host>-<pid>"
        )
    if consumer == HANDED_BACK:
        raise ConfigurationError(
            f"the worker's {what} {consumer!r} is reserved: the repair queue holds the "
            "jobs handed back on stop under it; give the worker another name"
        )
    return consumer


def holder_arg(holder: str | None) -> str:
    """The `holder` argument of a queue script: '' for any consumer, else a worker's
    name (`check_consumer`: the hand-back consumer holds no job of its own)."""
    return "" if holder is None else check_consumer(holder, "holder")


@dataclass(frozen=True, slots=True)
class Job:
    """One repair job as a worker sees it."""

    id: str
    stream: bytes
    group: bytes
    keys: list[bytes]
    seen: dict[str, str | None]
    reason: str
    enqueued_at: float
    attempts: int
    deliveries: int = 1
    last_error: str | None = None
    mode: str | None = None
    delays: tuple[float, ...] = ()
    """The delay (seconds) before each retry so far, oldest first."""
    waited: float = 0.0
    """Seconds this job was put off, in all, waiting for a transaction still committing
    at its keys (those waits count no attempt; see `RepairQueue.postpone`)."""

    def fields(self) -> dict[bytes, bytes]:
        return encode_fields(
            self.group,
            self.keys,
            self.seen,
            self.reason,
            self.enqueued_at,
            self.attempts,
            self.mode,
            self.delays,
            self.waited,
        )


def check_job(
    group: bytes | str, keys: Iterable[bytes | str], mode: str | None
) -> tuple[bytes, list[bytes]]:
    """The group and keys of a job to enqueue, as bytes; InvalidKeyError (or, for
    `mode`, ConfigurationError) naming what is wrong. A job with no keys, or with the
    characters of one key string as its keys, was queued and dead-lettered later."""
    gkey = to_bytes(group) if isinstance(group, bytes | str) else None
    if not gkey:
        raise InvalidKeyError(f"the repair job's group name is empty or not text: {group!r}")
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise InvalidKeyError(
            f"the keys of group {group!r} must be a list of key names, got {keys!r}", key=None
        )
    listed = [to_bytes(k) for k in keys]
    if not listed:
        raise InvalidKeyError(
            f"enqueue of group {group!r} names no keys: give the keys the job repairs", key=group
        )
    if mode not in (None, "stamp", "commit"):
        raise ConfigurationError(f"a repair job's mode is 'stamp' or 'commit', got {mode!r}")
    return gkey, listed


def encode_fields(
    group: bytes,
    keys: Sequence[bytes],
    seen: Mapping[str, str | None],
    reason: str,
    enqueued_at: float,
    attempts: int,
    mode: str | None = None,
    delays: Sequence[float] = (),
    waited: float = 0.0,
) -> dict[bytes, bytes]:
    fields = {
        b"group": group,
        b"keys": json.dumps([k.decode("utf-8", "surrogateescape") for k in keys]).encode(),
        b"seen": json.dumps(dict(seen)).encode(),
        b"reason": reason.encode(),
        b"enqueued_at": repr(enqueued_at).encode(),
        b"attempts": str(attempts).encode(),
    }
    if mode is not None:
        fields[b"mode"] = mode.encode()
    if delays:
        fields[b"delays"] = json.dumps([round(d, 3) for d in delays]).encode()
    if waited > 0:
        fields[b"waited"] = repr(round(waited, 3)).encode()
    return fields


def flatten(fields: Mapping[bytes, bytes]) -> list[bytes]:
    return [part for pair in fields.items() for part in pair]


def as_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_delays(raw: bytes | None) -> tuple[float, ...]:
    if raw is None:
        return ()
    values = json.loads(raw)
    if not isinstance(values, list):
        raise ValueError("delays is not a JSON list")
    return tuple(float(v) for v in values)


def _waited(raw: bytes | None) -> float:
    """The `waited` field: a finite number of seconds, at least 0 (ValueError else)."""
    if raw is None:
        return 0.0
    value = float(raw)
    if not 0 <= value < float("inf"):
        raise ValueError(f"waited is not a number of seconds: {raw!r}")
    return value


def parse_job(stream: bytes, eid: Any, raw: Any, deliveries: int, max_attempts: int) -> Job:
    """The job in a stream entry; a malformed entry becomes a job that can only be
    dead-lettered (attempts = `max_attempts`), never an exception."""
    fields = dict(zip(raw[::2], raw[1::2], strict=True)) if isinstance(raw, list) else raw
    try:
        keys = json.loads(fields[b"keys"])
        seen = json.loads(fields.get(b"seen", b"{}"))
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError("keys is not a JSON list of strings")
        if not isinstance(seen, dict):
            raise ValueError("seen is not a JSON object")
        return Job(
            id=as_text(eid),
            stream=stream,
            group=fields[b"group"],
            keys=[k.encode("utf-8", "surrogateescape") for k in keys],
            seen=seen,
            reason=as_text(fields.get(b"reason", b"torn")),
            enqueued_at=float(fields.get(b"enqueued_at", b"0")),
            attempts=int(fields.get(b"attempts", b"0")),
            deliveries=deliveries,
            last_error=as_text(fields[b"last_error"]) if b"last_error" in fields else None,
            mode=as_text(fields[b"mode"]) if b"mode" in fields else None,
            delays=parse_delays(fields.get(b"delays")),
            waited=_waited(fields.get(b"waited")),
        )
    except Exception as exc:  # whatever another program wrote there
        # A poison entry: keep it visible as a job that can only be dead-lettered. (An
        # exception let through, OverflowError from a huge number, failed the whole
        # claim, stranding the batch's jobs; a --burst worker then stopped early.)
        group = fields.get(b"group", b"?") if isinstance(fields, dict) else b"?"
        return Job(
            id=as_text(eid),
            stream=stream,
            group=group if isinstance(group, bytes) else b"?",
            keys=[],
            seen={},
            reason="malformed",
            enqueued_at=0.0,
            attempts=max_attempts,
            deliveries=deliveries,
            last_error=f"malformed job entry ({type(exc).__name__}: {str(exc)[:200]})",
        )
