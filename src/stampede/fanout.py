"""Scatter-gather reads: many keys, one round trip per shard, all shards at once.

```python
from stampede import fanout

values = await fanout.mget(st, ["user:1:name", "user:2:name", "user:3:name"])
payloads = await fanout.mget(st, keys, decode=True)      # envelopes -> payloads
```

Keys that share a hash tag live on one shard and cost one MGET; keys spread over
slots cost one request per shard, sent in parallel, so the latency is that of the
slowest shard rather than the sum. Results come back in the caller's order.
These are plain reads: they say nothing about whether the values belong to one
write (use `Stampede.read` for a group that must be consistent).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from .atomic import Target, topology_of
from .errors import InvalidKeyError, InvalidValueError
from .keys import to_bytes
from .wire import Envelope

__all__ = ["mget", "mget_envelopes", "mget_map", "shards_for"]

K = TypeVar("K", bytes, str)
T = TypeVar("T")


def _listed(keys: Iterable[T], operation: str) -> list[T]:
    """`keys` as a list, read once (a generator too); one key, or no iterable, is an
    `InvalidValueError` (a `TypeError`) saying what to pass."""
    if isinstance(keys, str | bytes | bytearray):
        raise InvalidValueError(
            f"{operation} takes a sequence of keys, not one key; wrap it: [{keys!r}]"
        )
    if not isinstance(keys, Iterable):
        raise InvalidValueError(f"{operation} takes a sequence of keys, got {type(keys).__name__}")
    return list(keys)


def _raw_keys(keys: Sequence[bytes | str], operation: str) -> list[bytes]:
    keys = _listed(keys, operation)
    raw: list[bytes] = []
    for pos, key in enumerate(keys):
        if not isinstance(key, str | bytes):
            raise InvalidKeyError(
                f"{operation}: key #{pos} is a {type(key).__name__}; keys are str or bytes",
                key=None,
            )
        data = to_bytes(key)
        if not data:
            raise InvalidKeyError(f"{operation}: key #{pos} is empty", key=key)
        raw.append(data)
    return raw


def shards_for(target: Target, keys: Sequence[K]) -> dict[str, list[K]]:
    """Which shard each key lives on: shard name -> its keys, in the caller's order.

    `len(shards_for(st, keys))` is the number of requests `mget` sends.
    """
    topology = topology_of(target)
    plan: dict[str, list[K]] = {}
    keys = _listed(keys, "shards_for()")
    for key, raw in zip(keys, _raw_keys(keys, "shards_for()"), strict=True):
        plan.setdefault(topology.shard_of(raw), []).append(key)
    return plan


async def mget(
    target: Target, keys: Sequence[bytes | str], *, decode: bool = False
) -> list[bytes | None]:
    """GET every key, one round trip per shard in parallel; values in the caller's order.

    None for a missing key. With `decode=True` each value must be a stampede
    envelope and its payload is returned (None for a tombstone: the key was
    deleted; `MalformedEnvelope` naming the key otherwise). A shard that fails
    raises `ShardError` naming it. Keys may repeat; an empty list returns `[]`
    without a round trip.
    """
    raw = _raw_keys(keys, "mget()")
    if not raw:
        return []
    values = await topology_of(target).fetch(raw)
    if not decode:
        return values
    return [
        None if value is None else Envelope.decode(value, key=key).value
        for key, value in zip(raw, values, strict=True)
    ]


async def mget_envelopes(target: Target, keys: Sequence[bytes | str]) -> list[Envelope | None]:
    """Like `mget`, but the decoded envelopes (version, token, payload); None when missing."""
    raw = _raw_keys(keys, "mget_envelopes()")
    if not raw:
        return []
    values = await topology_of(target).fetch(raw)
    return [
        None if value is None else Envelope.decode(value, key=key)
        for key, value in zip(raw, values, strict=True)
    ]


async def mget_map(
    target: Target, keys: Sequence[K], *, decode: bool = False
) -> dict[K, bytes | None]:
    """Like `mget`, as a dict from each key (as the caller spelled it) to its value."""
    keys = _listed(keys, "mget_map()")
    values = await mget(target, keys, decode=decode)
    return dict(zip(keys, values, strict=True))
