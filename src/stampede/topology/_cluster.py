"""`Cluster`: a Redis Cluster, on stampede's own connections.

The slot map comes from `CLUSTER SLOTS` (`_discovery`). A plan becomes one
pipeline per node (one read or one guarded-script call per slot inside it), all
nodes at once, straight to each node's lane. MOVED, ASK and TRYAGAIN are followed
here, command by command (ASKING and the redirected command on one connection);
what still fails is translated into a `ShardError` naming the node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Unpack

from .._lua import Script
from ..errors import ConfigurationError, SetupError, ShardError, ShardUnavailable
from ..keys import SlotMap, keyslot
from ..options import ConnectOptions
from ._answered import answered
from ._base import WriteOutcome, carried, translate
from ._checks import ServerInfo, probe, redact
from ._cluster_io import NodeIO, NodeReads, NodeWrites
from ._coalesce import Coalescer
from ._discovery import AddressRemap, SlotTable
from ._durable import (
    acks_of,
    asks_durability,
    plain_stamp,
    script_with_wait,
    sent_with_wait,
    wait_commands,
)
from ._endpoint import node_url, parse_url
from ._floor import needs_floors, raise_floors
from ._guard import EXPIRED, GUARD, WriteRequest, split_codes, unknown_if_resent
from ._lane import Sent
from ._node_ops import Body, Command, eval_fallback, marker_id, optimistic_once, transaction
from ._plan import fetch_parts, requests_of, write_parts
from ._resp import AskError, MovedError, TryAgainError
from ._retries import Markers, watch_losses
from ._rounds import script_round
from ._router import ERRORS, TRANSIENT, Router
from ._scans import ScanCursors, is_scan, scan_page

if TYPE_CHECKING:
    from ..typing import GuardStamp

__all__ = ["Cluster"]


class Cluster:
    """A Redis Cluster; keys route by slot as the server defines it."""

    slot_bound = True
    """A script or MULTI/EXEC may only touch keys of one hash slot."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        options: ConnectOptions | None = None,
        address_remap: AddressRemap | None = None,
    ) -> None:
        """A cluster reached through one or more startup nodes' URLs (the first one's
        credentials and TLS settings hold for every node). `address_remap` maps the
        addresses the cluster announces to the ones to connect to (a proxy, a NAT)."""
        opts = options or ConnectOptions()
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ConfigurationError("a cluster needs at least one startup node URL")
        self._urls, self._url, self._options = urls, urls[0], opts
        self._endpoint = parse_url(urls[0], opts)
        startups = [parse_url(u, opts).name for u in urls]
        self._table = SlotTable(startups, address_remap)
        self._router = Router(self._endpoint, self._table, opts)
        self._io = NodeIO(self._router)
        self._batchers: dict[str, tuple[Coalescer[Any, Any], Coalescer[Any, Any]]] = {}
        self._markers = Markers(keyslot)
        self._scans = ScanCursors()
        self._refresher: asyncio.Task[None] | None = None

    async def _startup(self) -> ServerInfo:
        """Probe the startup nodes in turn; the first that answers (else its error)."""
        timeout = self._options.socket_timeout
        first: BaseException | None = None
        for url, name in zip(self._urls, self._table.startups, strict=True):
            try:
                return await probe(self._router.lane_at(name), url, waited=timeout)
            except SetupError as exc:
                if exc.problem not in ("unreachable", "timeout"):
                    raise
                first = first or exc
        assert first is not None
        raise first

    async def open(self) -> None:
        """Check a startup node, learn the slot map, and check every primary.

        `SetupError` (naming the URL and the fix) when no startup node can be reached,
        one cannot be used (credentials, ACL, TLS), is not cluster-enabled, or a primary
        does not answer: while one does not, the map is learnt again, within
        `failover_timeout` (a failover under way: `_answered`). Then the map reloads
        every `refresh_interval` s in the background.
        """
        self._router.reopen()  # (after an `aclose`)
        info = await self._startup()
        if info.cluster_enabled is False:
            raise SetupError(
                "is not a Redis Cluster node (cluster_enabled:0); drop cluster=True and "
                "list every independent primary's URL instead, in one fixed order",
                url=redact(self._url),
                problem="not-cluster",
            )
        await self._load_slots()
        await answered(self._probe_primaries, self._load_slots, self._options)
        primaries = self.shard_names
        for name in [n for n in self._router.lanes if n not in primaries]:
            await self._router.lanes.pop(name).aclose()  # the startup node under another name
        if self._options.refresh_interval > 0 and self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        """Reload the slot map every `refresh_interval` seconds (a failed reload waits
        for the next turn: calls reload on their own when they meet a stale map)."""
        while True:
            await asyncio.sleep(self._options.refresh_interval)
            with contextlib.suppress(*ERRORS):
                await self._router.refresh()

    async def _probe_primaries(self) -> None:
        """`probe` every primary of the map; what one raises (`SetupError`)."""
        lane, timeout = self._router.lane_at, self._options.socket_timeout
        found = await asyncio.gather(
            *(probe(lane(n), node_url(self._url, n), waited=timeout) for n in self.shard_names),
            return_exceptions=True,
        )
        for result in found:
            if isinstance(result, BaseException):
                raise result

    async def _load_slots(self) -> None:
        try:
            await self._table.load(self._router.ask_slots)
        except ERRORS as exc:
            nodes = ", ".join(self._table.startups)
            raise ShardUnavailable(
                f"could not load the cluster's slot map ({exc}); is it a cluster-enabled "
                "node and is the cluster up (CLUSTER INFO: cluster_state:ok)?",
                shard=nodes,
            ) from exc

    @property
    def shard_names(self) -> list[str]:
        return self._table.primaries

    @property
    def slot_map(self) -> SlotMap:
        """The slot map as last learnt (`open()`, then every MOVED)."""
        return self._table.slot_map()

    def slot_of(self, key: bytes) -> int:
        return keyslot(key)

    def shard_of(self, key: bytes) -> str:
        return self._router.node(keyslot(key))

    def _coalescers(self, node: str) -> tuple[Coalescer[Any, Any], Coalescer[Any, Any]]:
        pair = self._batchers.get(node)
        if pair is None:
            batch = self._options.batch_keys if self._options.coalesce else 1
            reads, writes = NodeReads(self._io, node), NodeWrites(self._io, node)
            pair = self._batchers[node] = (
                Coalescer(reads.run, size=len, max_items=batch, quick=reads),
                Coalescer(writes.run, size=len, max_items=batch, quick=writes),
            )
        return pair

    def fetch(self, keys: Sequence[bytes]) -> Coroutine[Any, Any, list[bytes | None]]:
        plan = self._router.by_slots([keyslot(k) for k in keys])
        parts = [(self._coalescers(n)[0], pos) for n, pos in plan.items()]
        return fetch_parts(keys, parts, list(plan), requests_of(keys, parts))

    async def write_guarded(
        self, keys: Sequence[bytes], values: Sequence[bytes], **stamp: Unpack[GuardStamp]
    ) -> WriteOutcome:
        slots = [keyslot(k) for k in keys]
        if asks_durability(stamp):
            # carried: a guard that landed gets its floors, even if the caller is cancelled
            return await carried(self._write_durable(keys, values, slots, stamp))
        parts = [(self._coalescers(n)[1], pos) for n, pos in self._router.by_slots(slots).items()]
        return await write_parts(
            keys, values, parts, [p for _, p in parts], stamp, slots, floors=self
        )

    async def _write_durable(
        self, keys: Sequence[bytes], values: Sequence[bytes], slots: list[int], stamp: GuardStamp
    ) -> WriteOutcome:
        """Per node: one EVAL of the guard per slot, then WAIT (and WAITAOF), on one
        connection (`_durable`). A node whose pipeline fails or is redirected gets the
        write again the usual way (following MOVED and ASK), and no acknowledgement."""
        outcome = WriteOutcome()
        again: list[int] = []
        resent: list[int] = []  # of those, the ones whose pipeline lost a reply

        async def one(node: str, positions: list[int]) -> None:
            by_slot: dict[int, list[int]] = {}
            for p in positions:
                by_slot.setdefault(slots[p], []).append(p)
            requests = [
                WriteRequest.build(keys, values, pos, (), **stamp) for pos in by_slot.values()
            ]
            commands: list[tuple[Any, ...]] = [
                ("EVALSHA", GUARD.sha, len(r.keys), *r.keys, *r.argv) for r in requests
            ]
            lane = self._router.lane_at(node)
            try:
                with watch_losses() as lost:  # (a resend refused as expired: unknown)
                    replies = await sent_with_wait(
                        lambda c: lane.pipeline(c, resend=True), commands, wait_commands(stamp)
                    )
                failed = any(isinstance(r, BaseException) for r in replies[: len(requests)])
            except ERRORS:
                failed = True
            if failed:
                again.extend(positions)
                resent.extend(positions if lost.count else ())
                return
            split = split_codes(requests, [c for r in replies[: len(requests)] for c in r], node)
            unsure = unknown_if_resent(split, node, lost.count)
            for request, codes in zip(requests, unsure, strict=True):
                if isinstance(codes, ShardError):
                    outcome.failed.update(dict.fromkeys(request.keys, codes))
                else:
                    outcome.results.update(zip(request.keys, codes, strict=True))
            outcome.acks[node] = acks_of(replies[len(requests) :])

        plan = self._router.by_slots(slots)
        await asyncio.gather(*(one(node, pos) for node, pos in plan.items()))
        if again:
            retried = await self.write_guarded(
                [keys[p] for p in again], [values[p] for p in again], **plain_stamp(**stamp)
            )
            outcome.results.update(retried.results)
            outcome.failed.update(retried.failed)
            for key in {keys[p] for p in resent if retried.results.get(keys[p]) == EXPIRED}:
                del outcome.results[key]  # sent again after a lost reply: unknown
                (outcome.failed[key],) = unknown_if_resent([[EXPIRED]], "cluster", 1)
            for node in {self._router.safe_shard(keys[p]) for p in again}:
                outcome.acks[node] = 0
        if needs_floors(outcome.results.values()):
            await raise_floors(self, outcome, stamp, wait_commands(stamp))
        return outcome

    async def execute(self, key: bytes, *args: Any, resend: bool | None = None) -> Any:
        try:
            node = self.shard_of(key)
        except ERRORS as exc:
            raise translate(exc, "cluster") from exc
        (result,) = await self._router.pipeline(node, [args], [key], resend=resend)
        if isinstance(result, BaseException):
            raise translate(result, node) from result
        return result

    async def execute_on(self, shard: str, *args: Any) -> Any:
        """Run one command on the named primary (SCAN, INFO and the like). A SCAN goes
        on only at the server process that gave its cursor (`_scans`)."""
        self._primary(shard)
        lane, scan = self._router.lane_at(shard), is_scan(args)
        try:
            reply = await (scan_page(lane, args) if scan else lane.call(*args))
        except ERRORS as exc:  # a primary that failed: the map reloads (a failover)
            raise self._router.failed(shard, exc) from exc
        return self._scans.checked(shard, args, reply) if scan else reply

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        """The keys of `keys`, found on the primary `shard`, whose slot it does not own.

        On a settled cluster there are none (the server refuses such writes); keys
        of a slot being migrated show up until the migration ends.
        """
        self._primary(shard)
        return [k for k in keys if self._router.safe_shard(k) != shard]

    def _primary(self, shard: str) -> None:
        """`ConfigurationError` for a name that is no node of the cluster;
        `ShardUnavailable` for a node it knew that is no primary now (a failover)."""
        if shard in self.shard_names:
            return
        if shard in self._router.lanes or shard in self._table.known():
            raise ShardUnavailable(
                f"is no longer a primary (a failover demoted or replaced it); the primaries "
                f"now: {', '.join(self.shard_names)}: take shard_names again",
                shard=shard,
            )
        raise ConfigurationError(f"no cluster primary named {shard!r}")

    def _single(self, keys: Sequence[bytes], what: str) -> str:
        slots = {keyslot(k) for k in keys}
        if len(slots) != 1:
            raise ConfigurationError(f"{what} needs every key in one slot")
        return self._router.node(slots.pop())

    async def _on_owner(self, keys: Sequence[bytes], what: str, call: Any) -> Any:
        """Run `call(lane)` on the slot owner's lane (`Router.on_owner`)."""
        return await self._router.on_owner(lambda: self._single(keys, what), what, call)

    async def optimistic(self, keys: Sequence[bytes], body: Body) -> tuple[bool, list[Any]]:
        """One WATCH / read / MULTI / EXEC attempt; (False, []) when a watched key changed."""
        result: tuple[bool, list[Any]] = await self._on_owner(
            keys,
            "a WATCH transaction",
            lambda lane: optimistic_once(lane, keys, body, self._marker(keys)),
        )
        return result

    def _marker(self, keys: Sequence[bytes]) -> bytes:
        """A fresh operation-marker key in the slot of `keys`."""
        return self._markers.key(keys[0], marker_id())

    async def transaction(self, keys: Sequence[bytes], commands: Sequence[Command]) -> list[Any]:
        """Run `commands` in MULTI/EXEC on the node that owns the slot of `keys`."""
        result: list[Any] = await self._on_owner(
            keys, "MULTI/EXEC", lambda lane: transaction(lane, commands, lambda: self._marker(keys))
        )
        return result

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        """Run a Lua script (EVALSHA, EVAL on NOSCRIPT) on the owner of the keys' slot."""
        node = self._single(keys, "a Lua script")
        results = await eval_fallback(
            self._router.runner(node, [keys[0]]), [("EVALSHA", script.sha, len(keys), *keys, *args)]
        )
        if isinstance(results[0], BaseException):
            raise translate(results[0], node) from results[0]
        return results[0]

    async def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
    ) -> list[Any]:
        """Each call on the owner of its keys' slot; the calls bound for one node go
        as one pipeline (EVALSHA, EVAL on NOSCRIPT; redirections followed one by one),
        every node's written at once without a task (`_rounds.script_round`)."""
        out: list[Any] = [None] * len(calls)
        by_node: dict[str, list[int]] = {}
        for i, (keys, _) in enumerate(calls):
            try:
                by_node.setdefault(self._single(keys, "a Lua script"), []).append(i)
            except ShardError as exc:
                out[i] = exc

        nodes = list(by_node)
        pipelines = [
            [("EVALSHA", script.sha, len(calls[i][0]), *calls[i][0], *calls[i][1]) for i in chosen]
            for chosen in by_node.values()
        ]

        async def resume(n: int, first: Sent | None) -> list[Any]:
            located = [calls[i][0][0] for i in by_node[nodes[n]]]
            run = self._router.runner(nodes[n], located, first=first)
            return await eval_fallback(run, pipelines[n])

        lanes = [self._router.lane_at(node) for node in nodes]
        for node, replies in zip(nodes, await script_round(lanes, pipelines, resume), strict=True):
            if isinstance(replies, BaseException):
                raise replies
            for i, reply in zip(by_node[node], replies, strict=True):
                out[i] = translate(reply, node) if isinstance(reply, BaseException) else reply
        return out

    async def durable_script(
        self, script: Script, keys: Sequence[bytes], args: Sequence[Any], then: list[Command]
    ) -> tuple[Any, int]:
        """`script` and then the waits `then` on one connection to the slot's owner; its
        reply and the replicas that acknowledged. A call redirected or met by a failing
        node goes again the usual way (`script`), acknowledged by no replica."""
        node = self._single(keys, "a Lua script")
        run = partial(self._router.lane_at(node).pipeline, resend=script.idempotent)
        try:
            return await script_with_wait(run, script, keys, args, then)
        except (*ERRORS, MovedError, AskError, TryAgainError, *TRANSIENT) as exc:
            self._router.stale(node)
            if not script.idempotent:
                raise translate(exc, node) from exc
        except Exception as exc:
            raise translate(exc, node) from exc
        return await self.script(script, keys, args), 0

    async def aclose(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.wait([self._refresher])  # (a cancel of aclose itself stays one)
            self._refresher = None
        try:  # batches in flight first; the lanes closed even if that is cancelled
            for coalescer in [c for pair in self._batchers.values() for c in pair]:
                await coalescer.aclose()
        finally:
            await self._router.aclose()
