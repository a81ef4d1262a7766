"""Token-stamped event logs: per-key change lists and per-group event sets.

Formats (stable; see docs/patterns.md):

```
per-key log      list   <key>:log          entries  <token>:<change>          (RPUSH)
per-group events zset   <group>:events     members  <token>:<part>:<payload>  score = version
```

One logical write appends one entry per key (or one member per part) under one
token. The latest *consistent* state is the newest token with every expected part:
a write in flight (or dead half-way) lacks some, and the query passes over it.

Scores are doubles: a version above 2**53 (every `HybridClock` version, about
1.8e18 ns since the epoch) is rounded to a multiple of 256, so versions less than
256 ns apart share one score. Equal scores sort by member bytes, which start with
the ULID token, so the set's order is (score, token), the order the query walks.
`Snapshot.version` is the stored score, exact only below 2**53 (`version_exact`);
the write's exact version is in its data keys' envelopes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._commands import listed, mapping
from ._payload import as_bytes
from .atomic import Command, Target, topology_of
from .errors import (
    ConfigurationError,
    InvalidKeyError,
    MalformedEntry,
    PartialWriteError,
    RepliesLostError,
    ShardError,
)
from .keys import to_bytes
from .options import check_count
from .topology._base import unit_of
from .typing import Topology
from .wire import MAX_VERSION, TOKEN_LENGTH, is_token, new_token

__all__ = [
    "EXACT_SCORE_LIMIT",
    "Event",
    "LogEntry",
    "MalformedEntry",
    "Snapshot",
    "append_changes",
    "entry",
    "events_key",
    "latest_changes",
    "latest_events",
    "log_key",
    "member",
    "new_token",
    "read_events",
    "read_log",
    "record_events",
    "trim_events",
    "trim_logs",
]

K = TypeVar("K", bytes, str)
EXACT_SCORE_LIMIT = 2**53
"""Versions below this survive a sorted-set score (a double) exactly."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One entry of a per-key log: the write's token and the change it made."""

    token: str
    change: bytes


@dataclass(frozen=True, slots=True)
class Event:
    """One member of a group's event set, with its score (the version, as a double)."""

    token: str
    part: bytes
    payload: bytes
    score: float

    @property
    def version(self) -> int:
        """The version as stored: exact only below 2**53 (see the module notes)."""
        return int(self.score)


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[K]):
    """The newest write whose every expected part was found.

    `parts` maps each expected key (logs) or part name (events) to its change or
    payload. `version` is None for per-key logs (lists carry no version).
    """

    token: str
    parts: Mapping[K, bytes]
    version: int | None = None

    @property
    def version_exact(self) -> bool:
        """True when `version` is the write's exact version (it is below 2**53)."""
        return self.version is not None and self.version < EXACT_SCORE_LIMIT


def log_key(key: bytes | str) -> bytes:
    """`<key>:log`. It shares the key's slot only when the key has a hash tag."""
    return to_bytes(key) + b":log"


def events_key(group: bytes | str) -> bytes:
    """`<group>:events`, co-located with the group's keys when the group has a tag."""
    return to_bytes(group) + b":events"


def entry(token: str, change: bytes | str) -> bytes:
    """One log entry, `<token>:<change>`, for RPUSH inside your own MULTI or script."""
    return _token(token).encode() + b":" + as_bytes(change, "a log change")


def member(token: str, part: bytes | str, payload: bytes | str) -> bytes:
    """One event-set member, `<token>:<part>:<payload>` (the part may not contain ':')."""
    return b"%s:%s:%s" % (
        _token(token).encode(),
        _part_name(part),
        as_bytes(payload, "an event payload"),
    )


def _parse(raw: bytes, key: bytes) -> tuple[str, bytes]:
    if len(raw) <= TOKEN_LENGTH or raw[TOKEN_LENGTH : TOKEN_LENGTH + 1] != b":":
        raise MalformedEntry(key, "no 26-character token followed by ':'")
    token = raw[:TOKEN_LENGTH].decode("ascii", "replace")
    if not is_token(token):
        raise MalformedEntry(key, "the token is not an upper-case ULID")
    return token, raw[TOKEN_LENGTH + 1 :]


def _part_name(part: bytes | str) -> bytes:
    raw = to_bytes(part)
    if not raw or b":" in raw:
        problem = f"event part name {part!r} must be non-empty and contain no ':'"
        raise InvalidKeyError(problem, key=part)
    return raw


def _token(token: str | None) -> str:
    if token is None:
        return new_token()
    if not is_token(token):
        raise ConfigurationError(f"token must be a 26-character upper-case ULID, got {token!r}")
    return token


async def _per_shard(
    topology: Topology, keys: Sequence[bytes], build: Callable[[list[bytes]], list[Command]]
) -> list[tuple[list[bytes], list[Any] | ShardError]]:
    """One MULTI/EXEC per shard (per slot on a cluster) over `keys`, all at once.

    Keys in one slot make one transaction. Returns each batch of keys with its
    replies (empty when they were lost after it applied), or the `ShardError` that
    batch met. Each transaction is exactly-once (see `Topology.transaction`).
    """
    batches: dict[object, list[bytes]] = {}
    for key in dict.fromkeys(keys):
        batches.setdefault(unit_of(topology, key), []).append(key)
    groups = list(batches.values())
    replies = await asyncio.gather(
        *(topology.transaction(g, build(g)) for g in groups), return_exceptions=True
    )
    out: list[tuple[list[bytes], list[Any] | ShardError]] = []
    for group, reply in zip(groups, replies, strict=True):
        if isinstance(reply, RepliesLostError):
            reply = []  # applied exactly once (its marker says so); only the replies were lost
        if isinstance(reply, BaseException) and not isinstance(reply, ShardError):
            raise reply
        out.append((group, reply))
    return out


async def append_changes(
    target: Target, changes: Mapping[K, bytes | str], *, token: str | None = None
) -> str:
    """RPUSH `<token>:<change>` onto `<key>:log` for every key; returns the token.

    Logs in one slot (tagged keys) are appended in one MULTI/EXEC, atomically;
    spread logs get one MULTI per shard, all shards at once. `PartialWriteError`
    (listing the logs on each side) when a shard failed: the entries that landed
    carry the token, and `latest_changes` passes over the incomplete write.

    Each entry lands once: when a reply is lost, the transaction's operation
    marker tells whether it applied, and it is sent again only when it did not
    (`OutcomeUnknownError` when the shard cannot be asked).
    """
    changes = mapping(changes, "append_changes()")
    token = _token(token)
    entries = {log_key(k): entry(token, v) for k, v in changes.items()}
    results = await _per_shard(
        topology_of(target), list(entries), lambda g: [("RPUSH", k, entries[k]) for k in g]
    )
    failed = [(g, r) for g, r in results if isinstance(r, ShardError)]
    if failed:
        cause = failed[0][1]
        assert isinstance(cause, ShardError)
        raise PartialWriteError(
            "event log " + ", ".join(k.decode("utf-8", "backslashreplace") for k in entries),
            landed=[k for g, r in results if not isinstance(r, ShardError) for k in g],
            failed=[k for g, _ in failed for k in g],
            cause=cause,
        ) from cause
    return token


async def read_log(target: Target, key: bytes | str, *, count: int | None = None) -> list[LogEntry]:
    """The last `count` entries (all when None) of `<key>:log`, oldest first."""
    if count is not None and check_count(count, "count", 0) == 0:
        return []
    lkey = log_key(key)
    raw = await topology_of(target).execute(lkey, "LRANGE", lkey, -count if count else 0, -1)
    return [LogEntry(*_parse(entry, lkey)) for entry in raw]


async def latest_changes(
    target: Target, keys: Sequence[K], *, depth: int = 64
) -> Snapshot[K] | None:
    """The newest write that reached the log of every key in `keys`, or None.

    Reads the last `depth` entries of each log (one MULTI per shard, all at once)
    and walks them from the newest: the first token found in every log wins (ties
    go to the larger, i.e. later, ULID). Entries of a write that reached only
    some logs are passed over.
    """
    keys = listed(
        keys, "the keys of latest_changes()", empty="name the keys whose logs make up a write"
    )
    depth = check_count(depth, "depth")
    logs = [log_key(k) for k in keys]
    results = await _per_shard(
        topology_of(target), logs, lambda g: [("LRANGE", k, -depth, -1) for k in g]
    )
    seen: dict[bytes, list[bytes]] = {}
    for group, reply in results:
        if isinstance(reply, ShardError):
            raise reply
        seen.update(zip(group, reply, strict=True))
    # token -> (how far from the newest entry, the change) per log
    found: list[dict[str, tuple[int, bytes]]] = []
    for lkey in logs:
        newest_first: dict[str, tuple[int, bytes]] = {}
        for distance, raw in enumerate(reversed(seen[lkey])):
            token, change = _parse(raw, lkey)
            newest_first.setdefault(token, (distance, change))
        found.append(newest_first)
    common = set(found[0]).intersection(*found[1:])
    if not common:
        return None
    best = max(common, key=lambda t: (-max(f[t][0] for f in found), t))
    return Snapshot(best, {k: f[best][1] for k, f in zip(keys, found, strict=True)})


async def trim_logs(target: Target, keys: Sequence[bytes | str], *, keep: int) -> None:
    """Keep only the newest `keep` entries of each key's log (LTRIM; 0 deletes the log).

    A write whose entries are trimmed from some logs but not others no longer
    counts as whole; keep at least as many entries as writes you may need to read.
    """
    keep = check_count(keep, "keep", 0)
    logs = [log_key(k) for k in listed(keys, "the keys of trim_logs()")]

    def build(group: list[bytes]) -> list[Command]:
        if keep == 0:
            return [("DEL", *group)]
        return [("LTRIM", k, -keep, -1) for k in group]

    for _, reply in await _per_shard(topology_of(target), logs, build):
        if isinstance(reply, ShardError):
            raise reply


async def record_events(
    target: Target,
    group: bytes | str,
    parts: Mapping[K, bytes | str],
    *,
    version: int,
    token: str,
) -> int:
    """ZADD one member `<token>:<part>:<payload>` per part to `<group>:events`.

    One command, so the parts given land together; record the parts of a write
    as they are acknowledged, or all at once (`receipt.version`, `receipt.token`).
    Returns how many members were new.
    """
    parts = mapping(parts, "record_events()")
    version = check_count(version, "version", 0, MAX_VERSION)
    ekey = events_key(group)
    args: list[bytes | str] = []
    for part, payload in parts.items():
        args += [str(version), member(token, part, payload)]
    added: int = await topology_of(target).execute(ekey, "ZADD", ekey, *args)
    return added


def _event(ekey: bytes, member: bytes, score: float) -> Event:
    token, rest = _parse(member, ekey)
    part, sep, payload = rest.partition(b":")
    if not sep or not part:
        raise MalformedEntry(ekey, "no '<part>:' after the token")
    return Event(token, part, payload, score)


async def read_events(
    target: Target, group: bytes | str, *, start: int = 0, count: int = 100
) -> list[Event]:
    """Events of `group`, newest first (by score, then token), from rank `start`."""
    if count < 1:
        return []
    ekey = events_key(group)
    raw = await topology_of(target).execute(
        ekey, "ZREVRANGE", ekey, start, start + count - 1, "WITHSCORES"
    )
    if raw and not isinstance(raw[0], list | tuple):  # RESP2: member, score, member, ...
        raw = list(zip(raw[::2], raw[1::2], strict=True))
    return [_event(ekey, member, float(score)) for member, score in raw]


async def latest_events(
    target: Target,
    group: bytes | str,
    parts: Sequence[K],
    *,
    page: int = 100,
    limit: int = 10_000,
) -> Snapshot[K] | None:
    """The newest token that recorded every one of `parts` in `<group>:events`, or None.

    Walks the set from the newest member in pages of `page`, grouping by token,
    until one token has every part (a write's members share score and token, so
    they are adjacent); gives up after `limit` members.
    """
    parts = listed(parts, "the parts of latest_events()", empty="name the parts a whole write has")
    wanted = {_part_name(p): p for p in parts}
    buckets: dict[str, dict[bytes, bytes]] = {}
    start = 0
    while start < limit:
        batch = await read_events(target, group, start=start, count=min(page, limit - start))
        for event in batch:
            bucket = buckets.setdefault(event.token, {})
            if event.part in wanted:
                bucket.setdefault(event.part, event.payload)
            if len(bucket) == len(wanted):
                return Snapshot(
                    event.token, {wanted[p]: v for p, v in bucket.items()}, event.version
                )
        if len(batch) < page:
            break
        start += len(batch)
    return None


async def trim_events(
    target: Target, group: bytes | str, *, keep: int | None = None, before: int | None = None
) -> int:
    """Drop old events: keep the newest `keep` members, or drop versions below `before`.

    Give exactly one. Counting members can cut the oldest kept write in half;
    `before` compares doubles, so versions within a rounding step of it may
    stay. Returns how many members were removed.
    """
    if (keep is None) == (before is None):
        raise ConfigurationError("trim_events() takes exactly one of keep= or before=")
    ekey = events_key(group)
    topology = topology_of(target)
    if keep is not None:
        keep = check_count(keep, "keep", 0)
        removed: int = await topology.execute(ekey, "ZREMRANGEBYRANK", ekey, 0, -keep - 1)
    else:
        removed = await topology.execute(ekey, "ZREMRANGEBYSCORE", ekey, "-inf", f"({before}")
    return removed
