"""`Shards`: independent primaries, routed by the client with Redis Cluster's slots.

16384 slots split into contiguous ranges, one per primary (or an explicit
`SlotMap`), so a hash tag co-locates keys here exactly as it does on a cluster.
An optional `HashPolicy` (a regex with a named group `tag`) picks the hashed part.
Each plan becomes one command per shard (MGET, or one guarded-script call), sent
to every shard at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import Any

from redis import exceptions as rex
from redis.asyncio import Redis

from ..errors import ConfigurationError
from ..keys import HashPolicy, SlotMap, keyslot
from ..options import ConnectOptions, redis_kwargs
from .base import Updater, WriteOutcome, guarded, translate
from .coalesce import Coalescer
from .guard import GUARD_SCRIPT, GUARD_SHA, WriteRequest, joined, split_codes
from .lane import Lane
from .node_ops import (
    Body,
    Command,
    Script,
    marker_id,
    optimistic_once,
    run_script,
    transaction,
    updater_body,
)
from .plan import fetch_parts, write_parts
from .retries import Markers

__all__ = ["Shards"]


class Shards:
    """A client-side sharded set of independent Redis primaries."""

    kind = "shards"

    def __init__(
        self,
        clients: Sequence[Redis],
        *,
        names: Sequence[str] | None = None,
        slot_map: SlotMap | None = None,
        policy: HashPolicy | None = None,
        options: ConnectOptions | None = None,
    ) -> None:
        if not clients:
            raise ConfigurationError("Shards needs at least one Redis primary")
        self._clients = list(clients)
        self._names = list(names) if names is not None else [_name_of(c) for c in clients]
        if len(self._names) != len(self._clients):
            raise ConfigurationError("Shards: one name per client is needed")
        self._map = slot_map or SlotMap.even(len(self._clients))
        if self._map.shards != len(self._clients):
            raise ConfigurationError(
                f"the slot map names {self._map.shards} shards but {len(self._clients)} "
                "URLs were given; give one URL per shard of the map"
            )
        self._policy = policy
        opts = options or ConnectOptions()
        self._lanes = [
            Lane(
                c,
                name=name,
                retries=opts.connection_retries,
                retry_base=opts.retry_base,
                retry_cap=opts.retry_cap,
            )
            for c, name in zip(self._clients, self._names, strict=True)
        ]
        self._markers = Markers(self.slot_of)
        batch = opts.batch_keys if opts.coalesce else 1
        self._readers = [
            Coalescer(partial(self._mget_batch, i), size=len, max_items=batch)
            for i in range(len(self._clients))
        ]
        self._writers = [
            Coalescer(partial(self._write_batch, i), size=len, max_items=batch)
            for i in range(len(self._clients))
        ]

    @classmethod
    def from_urls(
        cls,
        urls: Sequence[str],
        *,
        options: ConnectOptions | None = None,
        slot_map: SlotMap | None = None,
        policy: HashPolicy | None = None,
    ) -> Shards:
        """Connect (lazily) to one primary per URL, in slot-range order."""
        opts = options or ConnectOptions()
        if len(set(urls)) != len(urls):
            raise ConfigurationError("the same URL is listed twice; each shard needs its own")
        clients = []
        for url in urls:
            try:
                clients.append(Redis.from_url(url, **redis_kwargs(opts)))
            except ValueError as exc:
                raise ConfigurationError(f"bad Redis URL {url!r}: {exc}") from exc
        return cls(
            clients,
            names=[_name_of(c) for c in clients],
            slot_map=slot_map,
            policy=policy,
            options=opts,
        )

    @property
    def shard_names(self) -> list[str]:
        return list(self._names)

    @property
    def clients(self) -> list[Redis]:
        return list(self._clients)

    @property
    def slot_map(self) -> SlotMap:
        return self._map

    def slot_of(self, key: bytes) -> int:
        policy = self._policy
        return keyslot(key) if policy is None else policy.keyslot(key)

    def _index(self, key: bytes) -> int:
        policy = self._policy
        return self._map.shard_of(keyslot(key) if policy is None else policy.keyslot(key))

    def shard_of(self, key: bytes) -> str:
        return self._names[self._index(key)]

    def _partition(self, keys: Sequence[bytes]) -> dict[int, list[int]]:
        """Shard index -> positions of `keys` that live there."""
        parts: dict[int, list[int]] = {}
        index = self._index
        for pos, key in enumerate(keys):
            parts.setdefault(index(key), []).append(pos)
        return parts

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        parts = [(self._readers[s], pos) for s, pos in self._partition(keys).items()]
        return await fetch_parts(keys, parts)

    async def write_guarded(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        *,
        version: int,
        token: str,
        expire_at_ms: int | None = None,
        limit: int = 0,
    ) -> WriteOutcome:
        parts = [(self._writers[s], pos) for s, pos in self._partition(keys).items()]
        return await write_parts(
            keys,
            values,
            parts,
            version=version,
            token=token,
            expire_at_ms=expire_at_ms,
            limit=limit,
        )

    async def _mget_batch(self, shard: int, requests: list[list[bytes]]) -> list[Any]:
        """One MGET for every read of this loop turn on `shard`."""
        flat = [key for keys in requests for key in keys]
        try:
            values = await self._lanes[shard].call("MGET", *flat)
        except (rex.RedisError, OSError, TimeoutError) as exc:
            raise translate(exc, self._names[shard]) from exc
        out: list[Any] = []
        pos = 0
        for keys in requests:
            out.append(values[pos : pos + len(keys)])
            pos += len(keys)
        return out

    async def _write_batch(self, shard: int, requests: list[WriteRequest]) -> list[Any]:
        """One guarded-script call for every write of this loop turn on `shard`."""
        keys, argv, _ = joined(requests)
        lane = self._lanes[shard]
        try:
            try:
                codes = await lane.call("EVALSHA", GUARD_SHA, len(keys), *keys, *argv)
            except rex.NoScriptError:
                codes = await lane.call("EVAL", GUARD_SCRIPT, len(keys), *keys, *argv)
        except (rex.RedisError, OSError, TimeoutError) as exc:
            raise translate(exc, self._names[shard]) from exc
        return split_codes(requests, codes, self._names[shard])

    async def incr(self, key: bytes) -> int:
        """INCR a version counter. Resent after a lost reply: a counter only has to
        grow, and a resent INCR leaves a gap, never a repeat."""
        shard = self._index(key)

        async def call() -> int:
            (reply,) = await self._lanes[shard].pipeline([("INCR", key)], resend=True)
            if isinstance(reply, BaseException):
                raise reply
            return int(reply)

        return await guarded(self._names[shard], call)

    async def execute(self, key: bytes, *args: Any) -> Any:
        """Run one command on the shard of `key`; its raw (RESP2) reply."""
        shard = self._index(key)
        return await guarded(self._names[shard], lambda: self._lanes[shard].call(*args))

    async def execute_on(self, shard: str, *args: Any) -> Any:
        """Run one command on the named shard (SCAN, INFO and the like); its raw reply."""
        if shard not in self._names:
            raise ConfigurationError(f"no shard named {shard!r}; shards: {self._names}")
        index = self._names.index(shard)
        return await guarded(shard, lambda: self._lanes[index].call(*args))

    def _single(self, keys: Sequence[bytes], what: str) -> int:
        indexes = {self._index(k) for k in keys}
        if len(indexes) != 1:
            raise ConfigurationError(f"{what} needs every key on one shard")
        return indexes.pop()

    async def watch_update(
        self, keys: Sequence[bytes], update: Updater, *, expire_at_ms: int | None = None
    ) -> bool:
        ok, _ = await self.optimistic(keys, updater_body(keys, update, expire_at_ms))
        return ok

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        """One WATCH / read / MULTI / EXEC attempt; (False, []) when a watched key changed."""
        shard = self._single(keys, "a WATCH transaction")
        marker = self._markers.key(keys[0], marker_id())
        return await guarded(
            self._names[shard], lambda: optimistic_once(self._lanes[shard], keys, body, marker)
        )

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        """Run `commands` in MULTI/EXEC on the shard that holds `keys`."""
        shard = self._single(keys, "MULTI/EXEC")
        lane = self._lanes[shard]

        def marker() -> bytes:
            return self._markers.key(keys[0], marker_id())

        return await guarded(self._names[shard], lambda: transaction(lane, commands, marker))

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        """Run a Lua script (EVALSHA, EVAL on NOSCRIPT) on the shard that holds `keys`."""
        shard = self._single(keys, "a Lua script")
        return await guarded(
            self._names[shard], lambda: run_script(self._lanes[shard], script, keys, args)
        )

    async def aclose(self) -> None:
        for coalescer in [*self._readers, *self._writers]:
            await coalescer.aclose()
        for lane in self._lanes:
            await lane.aclose()
        await asyncio.gather(*(c.aclose() for c in self._clients), return_exceptions=True)


def _name_of(client: Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
