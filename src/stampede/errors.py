"""Every error stampede raises, under one root.

```
StampedeError
├── ConfigurationError (ValueError)    bad options, URLs, patterns, strategies
│   └── SetupError                     open() refused the servers (names the URL and the fix)
├── InvalidKeyError (ValueError)       empty key, bad naming part
├── CrossSlotError (ValueError)        keys that had to share one slot do not
├── MalformedEnvelope (ValueError)     a stored value is not <version>:<token>:<payload>
├── MalformedEntry (ValueError)        an event-log entry is not <token>:...
├── ModelValidationError (ValueError)  a typed part failed pydantic validation
├── InvalidValueError (TypeError)      a value (or a loader's payload) is not bytes
├── ShardError                         one shard failed; names the shard
│   ├── ShardUnavailable (ConnectionError)
│   ├── ShardTimeout (TimeoutError)
│   ├── ShardResponseError             the server answered with an error
│   └── ClientClosedError              the client was closed: nothing sent, open() it again
├── WriteError
│   ├── PartialWriteError              some shards took the write, others did not
│   │   └── WriteTimeout (TimeoutError) ...because a shard did not answer in time
│   ├── WriteConflict                  WATCH lost the race too many times
│   ├── TransactionAborted             a transaction committed nowhere; nothing is visible
│   ├── OutcomeUnknownError            a reply was lost after a non-idempotent send
│   │   └── RepliesLostError           ...but the operation's marker proves it applied once
│   └── OrderingError                  a stored value cannot be ordered against the write
│       └── ClockSkewError             ...a clock far ahead, or a write expired on landing
├── ReadError
│   ├── TornReadError                  a group stayed torn; carries what was seen
│   ├── MixedWritersError              read_atomic() met a value no transaction wrote
│   └── ReadTimeout (ShardTimeout)     the read's deadline passed; names the late shard
└── RepairError                        a repair could not be made (loader failed, ...)
```

Messages say what was expected and what to do about it. They never contain a
payload: values may hold personal data and logs outlive it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .verdict import Observation

__all__ = [
    "ClientClosedError",
    "ClockSkewError",
    "ConfigurationError",
    "CrossSlotError",
    "InvalidKeyError",
    "InvalidValueError",
    "MalformedEntry",
    "MalformedEnvelope",
    "MixedWritersError",
    "ModelValidationError",
    "OrderingError",
    "OutcomeUnknownError",
    "PartialWriteError",
    "ReadError",
    "ReadTimeout",
    "RepairError",
    "RepliesLostError",
    "SetupError",
    "ShardError",
    "ShardResponseError",
    "ShardTimeout",
    "ShardUnavailable",
    "StampedeError",
    "TornReadError",
    "TransactionAborted",
    "WriteConflict",
    "WriteError",
    "WriteTimeout",
]


def _show(key: bytes | str) -> str:
    """Render a key for a message: keys are names, not payloads, so they may appear."""
    text = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else key
    return repr(text if len(text) <= 200 else text[:200] + "...")


class StampedeError(Exception):
    """Root of every error stampede raises."""


class ConfigurationError(StampedeError, ValueError):
    """An option, argument, URL, pattern or strategy is not usable as given."""


class SetupError(ConfigurationError):
    """`open()` refused the servers it was given, before anything was written.

    `url` names the server (its password hidden) and `problem` says what is wrong
    as a short code: `"unreachable"`, `"timeout"`, `"auth"`, `"permission"`, `"tls"`,
    `"database"` (no such database), `"cluster-node"` (a cluster node listed without
    `cluster=True`), `"not-cluster"` (`cluster=True` against a plain server),
    `"replica"` (a replica where a primary is needed), `"same-server"` (two URLs
    reach one server), `"order"`, `"count"` or `"layout"` (the URLs disagree with the
    shard identity records; see docs/wire-formats.md). The message gives the fix.
    """

    def __init__(self, message: str, *, url: str, problem: str) -> None:
        super().__init__(f"{url}: {message}")
        self.url = url
        self.problem = problem


class InvalidKeyError(StampedeError, ValueError):
    """A key (or a part of a key name) is not acceptable."""

    def __init__(self, message: str, *, key: bytes | str | None = None) -> None:
        super().__init__(message)
        self.key = key


class CrossSlotError(StampedeError, ValueError):
    """Keys that must share one hash slot do not; raised before anything is sent."""

    def __init__(self, slots: Mapping[bytes, int], *, operation: str = "this operation") -> None:
        self.slots = dict(slots)
        self.keys = list(self.slots)
        by_slot: dict[int, list[bytes]] = {}
        for key, slot in self.slots.items():
            by_slot.setdefault(slot, []).append(key)
        listing = "; ".join(
            f"slot {slot}: {', '.join(_show(k) for k in keys[:5])}"
            + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
            for slot, keys in sorted(by_slot.items())
        )
        super().__init__(
            f"{operation} needs every key in one hash slot, but they span "
            f"{len(by_slot)} slots ({listing}). Give the keys a shared hash tag, "
            "e.g. 'user:{42}:profile' and 'user:{42}:settings'."
        )


class MalformedEnvelope(StampedeError, ValueError):
    """A stored value is not a well-formed `<version>:<token>:<payload>` envelope."""

    def __init__(self, reason: str, *, key: bytes | str | None = None) -> None:
        self.key = key
        self.reason = reason
        where = f"value of key {_show(key)}" if key is not None else "value"
        super().__init__(
            f"{where} is not a stampede envelope: {reason}. Expected "
            "'<version>:<token>:<payload>' (decimal version, 26-character ULID token); "
            "was it written by another program?"
        )


class MalformedEntry(StampedeError, ValueError):
    """A log entry or event member is not `<token>:...`; names the key, never the content."""

    def __init__(self, key: bytes, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(
            f"entry of {_show(key)} is not a stampede event ({reason}); expected "
            "'<token>:<change>' in a log or '<token>:<part>:<payload>' in an event set. "
            "Was it written by another program?"
        )


class ModelValidationError(StampedeError, ValueError):
    """A part of a typed group did not validate against its pydantic model; `fields`
    names the failing fields (pydantic locations, e.g. `address.zip`), never values."""

    def __init__(
        self, key: bytes | str, model: str, errors: int, *, fields: Sequence[str] = ()
    ) -> None:
        self.key = key
        self.model = model
        self.fields = list(fields)
        more = f" (+{len(self.fields) - 10} more)" if len(self.fields) > 10 else ""
        where = f" at {', '.join(repr(f) for f in self.fields[:10])}{more}" if fields else ""
        super().__init__(
            f"value of key {_show(key)} does not validate as {model} "
            f"({errors} validation error{'s' if errors != 1 else ''}{where}); "
            "fix the writer or migrate the stored data."
        )


class InvalidValueError(StampedeError, TypeError):
    """A value handed to stampede is not bytes (or `str`, where text is accepted)."""

    def __init__(self, message: str, *, key: bytes | str | None = None) -> None:
        super().__init__(message)
        self.key = key


class ShardError(StampedeError):
    """One shard failed. `shard` names it (a URL or host:port)."""

    def __init__(self, message: str, *, shard: str) -> None:
        super().__init__(f"shard {shard}: {message}")
        self.shard = shard


class ShardUnavailable(ShardError, ConnectionError):
    """A shard refused or dropped the connection, and retries did not help."""


class ShardTimeout(ShardError, TimeoutError):
    """A shard did not answer in time (it may be paused, overloaded or partitioned)."""


class ShardResponseError(ShardError):
    """A shard answered with an error reply."""


class ClientClosedError(ShardError):
    """The client was closed (`aclose`) before this call went out: nothing was sent."""


class WriteError(StampedeError):
    """A logical write did not complete."""


class PartialWriteError(WriteError):
    """Some shards took the write and others did not.

    What landed is detectable: the next read of the group reports it in flight or
    torn. `landed` and `failed` list the keys on each side.
    """

    def __init__(
        self,
        group: bytes | str,
        *,
        landed: Sequence[bytes],
        failed: Sequence[bytes],
        cause: ShardError,
    ) -> None:
        self.group = group
        self.landed = list(landed)
        self.failed = list(failed)
        self.cause = cause
        self.shard = cause.shard
        super().__init__(
            f"write of group {_show(group)} is incomplete: {len(self.landed)} key(s) "
            f"acknowledged, {len(self.failed)} not ({cause}). Readers will see the group "
            "in flight or torn until it is written again or repaired."
        )


class WriteTimeout(PartialWriteError, TimeoutError):
    """A shard did not answer in time (it may still apply its part, harmlessly)."""


class WriteConflict(WriteError):
    """An optimistic (WATCH) update lost the race more times than allowed."""

    def __init__(self, group: bytes | str, attempts: int) -> None:
        self.group = group
        self.attempts = attempts
        super().__init__(
            f"update of group {_show(group)} lost to concurrent writers {attempts} "
            "times; retry later or raise max_attempts."
        )


class TransactionAborted(WriteError):
    """A transaction was committed nowhere, so nothing it wrote is visible: a prepare
    failed or was refused, or took too long. `keys` names the keys; `cause` the error."""

    def __init__(
        self, message: str, *, keys: Sequence[bytes] = (), cause: BaseException | None = None
    ) -> None:
        self.keys = list(keys)
        self.cause = cause
        super().__init__(f"transaction aborted, nothing was committed: {message}")


_RESENT = "it was resent (it is idempotent) and lost its reply each time"
_NOT_RESENT = "it was not sent again because it is not idempotent"


class OutcomeUnknownError(WriteError):
    """The connection was lost after an operation was sent, before its reply: the server
    may or may not have applied it. It was not sent again when that could apply it twice
    (`resent`: it was, and every reply was lost). `operation` names it, `shard` where."""

    def __init__(
        self,
        operation: str,
        *,
        shard: str,
        cause: BaseException | None = None,
        resent: bool = False,
    ) -> None:
        self.operation = operation
        self.shard = shard
        self.cause = cause
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        sent = _RESENT if resent else _NOT_RESENT
        super().__init__(
            f"{operation} on shard {shard}: the connection was lost after it was sent and "
            f"before its reply{why}; it may or may not have been applied, and {sent}. Read "
            "the keys it touches to find out."
        )


class RepliesLostError(OutcomeUnknownError):
    """A transaction's replies were lost, but its operation marker proves it applied
    exactly once (not sent again). `update()` and `append_changes` treat it as success;
    `atomic.multi` raises it, since the replies it would return are gone."""

    def __init__(self, operation: str, *, shard: str, cause: BaseException | None = None) -> None:
        super().__init__(operation, shard=shard, cause=cause)
        self.args = (
            f"{operation} on shard {shard}: the connection was lost before its reply; its "
            "operation marker shows it was applied exactly once (it was not sent again), "
            "but its replies are unknown. Read the keys it touches for their values.",
        )


class OrderingError(WriteError):
    """A key holds a stamped value this write cannot be ordered against; nothing was
    written to `keys`. `why`: `"mixed-sources"` (clock against sequence versions),
    `"foreign"` (a version not a decimal below 2**63), `"future"` or `"expired"`."""

    def __init__(self, group: bytes | str, keys: Sequence[bytes], why: str, detail: str) -> None:
        self.group = group
        self.keys = list(keys)
        self.why = why
        shown = ", ".join(_show(k) for k in self.keys[:5])
        super().__init__(f"write of group {_show(group)} refused at {shown}: {detail}")


class ClockSkewError(OrderingError):
    """A clock version far ahead of this writer's clock is stored (`"future"`), or the
    write's expiry had passed by the server's clock: this clock is behind (`"expired"`)."""


class ReadError(StampedeError):
    """A read could not produce a trustworthy answer."""


class TornReadError(ReadError):
    """A group stayed torn after retries; `seen` holds what each key looked like."""

    def __init__(
        self,
        group: bytes | str,
        *,
        reason: str,
        observation: Observation,
        attempts: int,
    ) -> None:
        self.group = group
        self.reason = reason
        self.observation = observation
        self.attempts = attempts
        self.seen = observation.seen()
        super().__init__(
            f"group {_show(group)} is torn ({reason}) after {attempts} read(s); "
            "pass repair=... to read() to repair it, or run the repair worker."
        )


class MixedWritersError(ReadError):
    """`read_atomic()` met values no transaction wrote (a group write, a repair, another
    program) or whose version hash was evicted; `keys` names them."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.keys = list(keys)
        super().__init__(
            f"read_atomic() cannot vouch for {', '.join(_show(k) for k in self.keys[:5])}: not "
            "written by a transaction (a group write, a repair, another program) or its version "
            "hash was evicted; write them with transaction(), or read them with read() "
            "(docs/transactions.md, 'Which reader for which writer')"
        )


class ReadTimeout(ReadError, ShardTimeout):
    """A read passed its deadline (`RetryPolicy.deadline`) before a shard answered.

    `shard` names the shard(s) still owing an answer (comma-separated), `group` the
    group and `deadline` the seconds allowed. A `ShardTimeout` and `TimeoutError` too.
    """

    def __init__(self, group: bytes | str, *, shard: str, deadline: float) -> None:
        self.group = group
        self.deadline = deadline
        super().__init__(
            f"read of group {_show(group)} passed its deadline of {deadline:g} s waiting for "
            "this shard (is it paused or overloaded?); retry later, or raise "
            "RetryPolicy.deadline if it is just slow",
            shard=shard,
        )


class RepairError(StampedeError):
    """A torn group could not be repaired; `group` names it, `reason` says why."""

    def __init__(self, group: bytes | str, message: str) -> None:
        self.group = group
        super().__init__(f"repair of group {_show(group)} failed: {message}")
