"""A group's commit record and a write's expiry. Pure.

The record is an envelope whose payload is the JSON list of the keys the write
covered (UTF-8; keys that are not UTF-8 use `surrogateescape` escapes), stored at
`<group>:stampede:commit` only after every data key of the write is acknowledged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError, MalformedEnvelope
from ._envelope import Envelope
from ._names import commit_key

__all__ = ["MAX_SECONDS", "CommitRecord", "decode_commit", "encode_commit", "expire_at"]


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """What a commit record says: the write's stamp and the keys it covered."""

    version: int
    token: str
    keys: frozenset[bytes]


def encode_commit(keys: Sequence[bytes]) -> bytes:
    """The commit record's payload: the JSON list of the keys the write covered."""
    return json.dumps([k.decode("utf-8", "surrogateescape") for k in keys]).encode()


def decode_commit(raw: bytes | None, group: bytes) -> CommitRecord | None:
    """The decoded record of `group`, or None when absent or unreadable (an unreadable
    record vouches for nothing)."""
    if raw is None:
        return None
    try:
        env = Envelope.decode(raw, key=commit_key(group))
        keys = json.loads(env.payload)
    except (MalformedEnvelope, ValueError, RecursionError):
        return None  # unreadable (or absurdly nested)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    try:  # keys that are not UTF-8 were written with surrogateescape
        named = frozenset(k.encode("utf-8", "surrogateescape") for k in keys)
    except UnicodeEncodeError:
        return None
    return CommitRecord(env.version, env.token, named)


MAX_SECONDS = 10**10
"""A ttl or grace window must be below this many seconds (about 317 years)."""


def expire_at(ttl: float | None, name: str = "ttl") -> int | None:
    """One absolute expiry (unix ms) for every key of a write, so they expire together.
    `name` is what the caller calls `ttl` (a delete's `grace`), for the error."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0.001 <= ttl < MAX_SECONDS:
        hint = (
            "pass None for no expiry (a ttl of 0 or less would drop the write at once)"
            if name == "ttl"
            else "pass None for the default"
        )
        raise ConfigurationError(
            f"{name} must be a number of seconds, at least 0.001 and below 10**10, got "
            f"{ttl!r}; {hint}"
        )
    return time.time_ns() // 1_000_000 + max(1, round(ttl * 1000))
