"""`Shards`: independent primaries, routed by the client with Redis Cluster's slots.

16384 slots split into contiguous ranges, one per primary (or an explicit
`SlotMap`), so a hash tag co-locates keys here exactly as it does on a cluster.
An optional `HashPolicy` (a regex with a named group `tag`) picks the hashed part.
Each plan becomes one command per shard (MGET, or one guarded-script call), sent
to every shard at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from ulid import ULID

from .._lua import Script
from ..errors import ConfigurationError, SetupError, ShardError
from ..keys import HashPolicy, SlotMap, keyslot
from ..options import ConnectOptions
from ._base import TRANSPORT_ERRORS, FixedShards, WriteOutcome
from ._checks import (
    IDENTITY_KEY,
    Identity,
    ServerInfo,
    check_identities,
    layout_digest,
    probe,
    redact,
    refusal,
    same_servers,
)
from ._coalesce import Coalescer
from ._durable import durable_write, script_with_wait
from ._endpoint import Endpoint, parse_url
from ._guard import WriteRequest
from ._lane import Lane, Sent
from ._node_ops import Body, Command, marker_id, optimistic_once, run_script, transaction
from ._plan import FetchPlans, Part, WritePlan, write_parts, write_plan
from ._retries import Markers, is_idempotent
from ._rounds import script_round
from ._scans import ScanCursors, is_scan, scan_page
from ._shard_io import ShardReads, ShardWrites, primary_call

if TYPE_CHECKING:
    from ..typing import GuardStamp

__all__ = ["Shards"]

T = TypeVar("T")

_PLACES_MAX = 1 << 16
"""Keys whose (slot, shard) a `Shards` remembers before it starts again."""


class Shards(FixedShards):
    """A client-side sharded set of independent Redis primaries."""

    slot_bound = False
    """A script or MULTI/EXEC may span every key of one shard (hash tags or not)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        slot_map: SlotMap | None = None,
        policy: HashPolicy | None = None,
        options: ConnectOptions | None = None,
    ) -> None:
        """One primary per URL, in slot-range order (connections open lazily)."""
        if isinstance(urls, str):
            urls = [urls]
        if not urls:
            raise ConfigurationError("Shards needs at least one Redis primary")
        if len(set(urls)) != len(urls):
            raise ConfigurationError("the same URL is listed twice; each shard needs its own")
        opts = options or ConnectOptions()
        endpoints = [parse_url(url, opts) for url in urls]
        self._build(list(urls), endpoints, [e.name for e in endpoints], opts, slot_map, policy)

    def _build(
        self,
        urls: list[str],
        endpoints: list[Endpoint],
        names: list[str],
        opts: ConnectOptions,
        slot_map: SlotMap | None,
        policy: HashPolicy | None,
    ) -> None:
        """Set up one lane, reader and writer per shard (`names` name them)."""
        self._options = opts
        self._urls = urls
        self._names = names
        self._map = slot_map or SlotMap.even(len(endpoints))
        if self._map.shards != len(endpoints):
            raise ConfigurationError(
                f"the slot map names {self._map.shards} shards but {len(endpoints)} "
                "URLs were given; give one URL per shard of the map"
            )
        self._policy = self.hash_policy = policy  # (`_floor.renames`)
        self._places: dict[bytes, tuple[int, int]] = {}
        self._write_plans: dict[tuple[bytes, ...], WritePlan] = {}  # see `write_plan`
        self._fetches = FetchPlans(self._fetch_plan)
        self._lanes = [
            Lane(
                endpoint,
                limit=opts.max_connections,
                retries=opts.connection_retries,
                retry_base=opts.retry_base,
                retry_cap=opts.retry_cap,
            )
            for endpoint in endpoints
        ]
        self._markers = Markers(self.slot_of)
        self._scans = ScanCursors()
        batch = opts.batch_keys if opts.coalesce else 1
        self._readers: list[Coalescer[list[bytes], Any]] = []
        self._writers: list[Coalescer[WriteRequest, Any]] = []
        for i, lane in enumerate(self._lanes):
            call = partial(self._call, i, safe=True)
            reads, writes = ShardReads(lane, call), ShardWrites(lane, call, names[i])
            self._readers.append(Coalescer(reads.run, size=len, max_items=batch, quick=reads))
            self._writers.append(Coalescer(writes.run, size=len, max_items=batch, quick=writes))

    async def open(self) -> None:
        """Check every primary before anything is written; `SetupError` if one is unfit.

        Each server must answer (credentials, ACL permissions and TLS included), be
        a plain primary rather than a cluster node, and be listed once (by its
        `run_id`, whatever the URL). Then, unless `check_identity` is off, each
        server's identity record must agree with its place in the list (written
        on first use; see docs/wire-formats.md).
        """
        for lane in self._lanes:
            lane.reopen()  # (after an `aclose`)
        timeout = self._options.socket_timeout
        found = await asyncio.gather(
            *(
                probe(lane, url, waited=timeout)
                for lane, url in zip(self._lanes, self._urls, strict=True)
            ),
            return_exceptions=True,
        )
        for result in found:
            if isinstance(result, BaseException):
                raise result
        infos = [r for r in found if isinstance(r, ServerInfo)]
        for info in infos:
            if info.cluster_enabled:
                raise SetupError(
                    "is a Redis Cluster node; connect with cluster=True and one node's URL "
                    "(stampede.connect(url, cluster=True)). Listed as independent primaries, "
                    "cluster nodes answer MOVED for the slots they do not own.",
                    url=redact(info.url),
                    problem="cluster-node",
                )
            info.refuse_replica()
        same_servers(infos)
        if self._options.check_identity:
            await self._check_identity()

    def _layout(self) -> str:
        patterns = () if self._policy is None else self._policy.patterns
        return layout_digest(repr(sorted(self._map.ranges().items())).encode(), patterns)

    async def _identities(self) -> list[Identity | None]:
        async def one(i: int) -> Identity | None:
            try:
                raw = await self._lanes[i].call("GET", IDENTITY_KEY)
            except TRANSPORT_ERRORS as exc:
                raise refusal(exc, self._urls[i]) from exc
            return None if raw is None else Identity.decode(raw, self._urls[i])

        return list(await asyncio.gather(*(one(i) for i in range(len(self._lanes)))))

    async def _claim(self, i: int, record: Identity) -> Identity | None:
        """SET the record NX on shard `i`; the record already there, if any."""
        try:
            old = await self._lanes[i].pipeline(
                [("SET", IDENTITY_KEY, record.encode(), "NX", "GET")], resend=True
            )
        except TRANSPORT_ERRORS as exc:
            raise refusal(exc, self._urls[i]) from exc
        reply = old[0]
        if isinstance(reply, BaseException):
            raise refusal(reply, self._urls[i]) from reply
        if reply is None or reply == record.encode():
            return None
        return Identity.decode(reply, self._urls[i])

    async def _check_identity(self) -> None:
        """Refuse URLs that disagree with the identity records; write the missing ones.

        Concurrent first opens agree: the deployment id is whatever shard #1 holds
        after a `SET NX` (a resend finds its own record, so it is safe to resend).
        """
        n, layout = len(self._lanes), self._layout()
        records = await self._identities()
        topology = check_identities(self._urls, records, layout)
        if topology is None:
            mine = Identity.fresh(0, n, str(ULID()), layout)
            theirs = await self._claim(0, mine)
            records[0] = theirs or mine
            topology = check_identities(self._urls, records, layout)
            assert topology is not None
        missing = [i for i, rec in enumerate(records) if rec is None]
        claimed = await asyncio.gather(
            *(self._claim(i, Identity.fresh(i, n, topology, layout)) for i in missing)
        )
        for i, theirs in zip(missing, claimed, strict=True):
            records[i] = theirs
        check_identities(self._urls, records, layout)

    async def write_identity(self) -> None:
        """Overwrite every primary's identity record with this list's order and layout.

        For re-sharding: once the keys sit where this `Shards` routes them, connect
        with `ConnectOptions(check_identity=False)` and call this once; later opens
        check against the new records.
        """
        n, layout, topology = len(self._lanes), self._layout(), str(ULID())

        async def one(i: int) -> None:
            record = Identity.fresh(i, n, topology, layout).encode()
            try:
                await self._lanes[i].pipeline([("SET", IDENTITY_KEY, record)], resend=True)
            except TRANSPORT_ERRORS as exc:
                raise refusal(exc, self._urls[i]) from exc

        await asyncio.gather(*(one(i) for i in range(n)))

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        """The keys of `keys`, found on `shard`, that route to another shard.

        For a scan: such a key was written under another URL order or slot map (or
        by another program), and reads never look for it where it is. Stampede's
        own per-server keys (the identity record) are never misrouted.
        """
        if shard not in self._names:
            raise ConfigurationError(f"no shard named {shard!r}; shards: {self._names}")
        here = self._names.index(shard)
        index = self._index
        return [k for k in keys if k != IDENTITY_KEY and index(k) != here]

    def slot_of(self, key: bytes) -> int:
        return self._place(key)[0]

    def _index(self, key: bytes) -> int:
        return self._place(key)[1]

    def _place(self, key: bytes) -> tuple[int, int]:
        """(slot, shard index) of `key`, remembered: a group's keys come back often."""
        place = self._places.get(key)
        if place is None:
            policy = self._policy
            slot = keyslot(key) if policy is None else policy.keyslot(key)
            if len(self._places) >= _PLACES_MAX:
                self._places.clear()
            place = self._places[key] = (slot, self._map.shard_of(slot))
        return place

    def shard_of(self, key: bytes) -> str:
        return self._names[self._index(key)]

    def _partition(self, keys: Sequence[bytes]) -> dict[int, list[int]]:
        """Shard index -> positions of `keys` that live there."""
        parts: dict[int, list[int]] = {}
        index = self._index
        for pos, key in enumerate(keys):
            parts.setdefault(index(key), []).append(pos)
        return parts

    def fetch(self, keys: Sequence[bytes]) -> Coroutine[Any, Any, list[bytes | None]]:
        return self._fetches.fetch(keys)  # `fetch_parts`, with the plans of tuples kept

    def _fetch_plan(self, keys: Sequence[bytes]) -> tuple[list[Part], list[str]]:
        by_shard = self._partition(keys)
        parts = [(self._readers[s], positions) for s, positions in by_shard.items()]
        return parts, [self._names[s] for s in by_shard]

    def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> Coroutine[Any, Any, WriteOutcome]:
        # A plain function returning the write's coroutine: one frame less per write.
        if stamp.get("replicas") or stamp.get("aof"):  # `asks_durability`
            by_shard, send = self._partition(keys), self._send_durable
            return durable_write(keys, values, stamp, by_shard, self._names, send, floors=self)
        parts, positions = write_plan(self._write_plans, keys, self._partition, self._writers)
        return write_parts(keys, values, parts, positions, stamp, floors=self)

    async def _send_durable(self, shard: int, commands: list[tuple[Any, ...]]) -> list[Any]:
        lane = self._lanes[shard]
        return await self._call(shard, lambda: lane.pipeline(commands, resend=True), safe=True)

    async def _call(self, shard: int, call: Callable[[], Awaitable[T]], *, safe: bool) -> T:
        """Await `call()`, which talks to shard `shard`, with its transport errors mapped
        to `ShardError`s naming the shard. `safe`: the call may be sent again (a hook:
        Sentinel-managed shards resend it to a new primary after a failover)."""
        return await primary_call(self._lanes[shard], self._names[shard], call, safe=safe)

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        """Run one command on the shard of `key`; its raw (RESP2) reply."""
        shard = self._index(key)
        safe = bool(resend) or (resend is None and is_idempotent(args))
        return await self._call(shard, lambda: _one(self._lanes[shard], args, resend), safe=safe)

    async def execute_on(self, shard: str, *args: Any) -> Any:
        """Run one command on the named shard (SCAN, INFO and the like); its raw reply.
        A SCAN goes on only at the server process that gave its cursor (`_scans`)."""
        if shard not in self._names:
            raise ConfigurationError(f"no shard named {shard!r}; shards: {self._names}")
        index = self._names.index(shard)
        lane = self._lanes[index]
        if is_scan(args):
            page = await self._call(index, partial(scan_page, lane, args), safe=True)
            return self._scans.checked(shard, args, page)
        return await self._call(index, lambda: lane.call(*args), safe=is_idempotent(args))

    def _single(self, keys: Sequence[bytes], what: str) -> int:
        places, place = self._places, self._place  # (`_index` inline: a round's hot path)
        indexes = {(places.get(k) or place(k))[1] for k in keys}
        if len(indexes) != 1:
            raise ConfigurationError(f"{what} needs every key on one shard")
        return indexes.pop()

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        """One WATCH / read / MULTI / EXEC attempt; (False, []) when a watched key changed."""
        shard = self._single(keys, "a WATCH transaction")
        marker = self._markers.key(keys[0], marker_id())
        return await self._call(
            shard, lambda: optimistic_once(self._lanes[shard], keys, body, marker), safe=False
        )

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        """Run `commands` in MULTI/EXEC on the shard that holds `keys`."""
        shard = self._single(keys, "MULTI/EXEC")
        lane = self._lanes[shard]

        def marker() -> bytes:
            return self._markers.key(keys[0], marker_id())

        return await self._call(shard, lambda: transaction(lane, commands, marker), safe=False)

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        """Run a Lua script (EVALSHA, EVAL on NOSCRIPT) on the shard that holds `keys`."""
        shard = self._single(keys, "a Lua script")
        return await self._call(
            shard,
            lambda: run_script(self._lanes[shard], script, keys, args),
            safe=script.idempotent,
        )

    async def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
    ) -> list[Any]:
        """Each call as one `script` call, all written at once without a task; a call
        not answered plainly goes on as `script` would (`_rounds.script_round`)."""
        shards = [self._single(keys, "a Lua script") for keys, _ in calls]

        async def resume(i: int, first: Sent | None) -> list[Any]:
            lane, (keys, args) = self._lanes[shards[i]], calls[i]
            run = partial(run_script, lane, script, keys, args, first)
            return [await self._call(shards[i], run, safe=script.idempotent)]

        pipelines = [[("EVALSHA", script.sha, len(k), *k, *a)] for k, a in calls]
        rounds = await script_round([self._lanes[s] for s in shards], pipelines, resume)
        for replies in rounds:
            if isinstance(replies, BaseException) and not isinstance(replies, ShardError):
                raise replies
        return [r if isinstance(r, BaseException) else r[0] for r in rounds]

    async def durable_script(
        self, script: Script, keys: Sequence[bytes], args: Sequence[Any], then: list[Command]
    ) -> tuple[Any, int]:
        shard = self._single(keys, "a Lua script")
        run = partial(self._lanes[shard].pipeline, resend=script.idempotent)
        return await self._call(
            shard, lambda: script_with_wait(run, script, keys, args, then), safe=script.idempotent
        )

    async def aclose(self) -> None:
        coalescers: list[Coalescer[Any, Any]] = [*self._readers, *self._writers]
        try:  # batches in flight first; the lanes closed even if that is cancelled
            for coalescer in coalescers:
                await coalescer.aclose()
        finally:
            for lane in self._lanes:
                await lane.aclose()


async def _one(lane: Lane, command: tuple[Any, ...], resend: bool | None) -> Any:
    """One command's reply on `lane` (an error reply raises)."""
    (reply,) = await lane.pipeline([command], resend=resend)
    if isinstance(reply, BaseException):
        raise reply
    return reply
