"""`Cluster`: a Redis Cluster, on stampede's own connections.

The slot map comes from `CLUSTER SLOTS` (`_discovery`). A plan becomes one
pipeline per node (one read or one guarded-script call per slot inside it), all
nodes at once, straight to each node's lane. MOVED, ASK and TRYAGAIN are followed
here, command by command (ASKING and the redirected command on one connection);
what still fails is translated into a `ShardError` naming the node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import Any

from .._lua import Script
from ..errors import ConfigurationError, SetupError, ShardUnavailable
from ..keys import keyslot
from ..options import ConnectOptions
from ._discovery import AddressRemap, SlotTable
from ._endpoint import parse_url
from ._resp import AskError, MovedError, NoScriptError, RedisError, TryAgainError
from .base import READ_WATCH, Updater, WriteOutcome, fetch_watched, translate
from .checks import probe, redact
from .coalesce import Coalescer
from .guard import (
    ARGS_PER_KEY,
    CROSS_SLOT_GUARD_SCRIPT,
    CROSS_SLOT_GUARD_SHA,
    GUARD_SCRIPT,
    GUARD_SHA,
    KEEP_MS,
    WriteRequest,
    joined,
    split_codes,
    without_keeping,
)
from .lane import Lane
from .node_ops import (
    Body,
    Command,
    marker_id,
    optimistic_once,
    transaction,
    updater_body,
)
from .plan import fetch_parts, write_parts
from .retries import Markers, idempotent_script

__all__ = ["Cluster"]


_SCRIPTS: dict[str, bytes] = {}

# Keys go in ARGV (no declared keys, so no CROSSSLOT check up front); each GET
# inside is still checked by the node, which errors for a key it does not serve
# right now (moved, or migrating away) instead of answering nil.
_READ = Script(
    b"#!lua flags=no-writes,allow-cross-slot-keys\n"
    b"local out = {}\n"
    b"for i, key in ipairs(ARGV) do out[i] = redis.call('GET', key) end\n"
    b"return out\n"
)
idempotent_script(_READ.source)


_SCRIPTS.update(
    {
        GUARD_SHA: GUARD_SCRIPT,
        CROSS_SLOT_GUARD_SHA: CROSS_SLOT_GUARD_SCRIPT,
        _READ.sha: _READ.source,
    }
)


def _as_eval(cmd: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The EVAL form of an EVALSHA of one of stampede's own scripts, else None."""
    if cmd[0] != "EVALSHA":
        return None
    source = _SCRIPTS.get(cmd[1])
    return None if source is None else ("EVAL", source, *cmd[2:])


def _redirect(result: Any) -> bool:
    return isinstance(result, MovedError | AskError | TryAgainError)


_ERRORS = (RedisError, OSError, TimeoutError)
_MAX_REDIRECTS = 16


class Cluster:
    """A Redis Cluster; keys route by slot as the server defines it."""

    kind = "cluster"

    def __init__(
        self,
        url: str,
        *,
        options: ConnectOptions | None = None,
        address_remap: AddressRemap | None = None,
    ) -> None:
        """A cluster reached through one startup node's URL (its credentials and TLS
        settings hold for every node). `address_remap` maps the addresses the cluster
        announces to the ones to connect to (a proxy, a NAT)."""
        opts = options or ConnectOptions()
        self._url = url
        self._options = opts
        self._endpoint = parse_url(url, opts)
        self._table = SlotTable(self._endpoint.name, address_remap)
        self._refreshing: asyncio.Future[None] | None = None
        self._lanes: dict[str, Lane] = {}
        self._no_read_script: set[str] = set()
        self._no_write_script: set[str] = set()
        self._batchers: dict[str, tuple[Coalescer[Any, Any], Coalescer[Any, Any]]] = {}
        self._markers = Markers(keyslot)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        options: ConnectOptions | None = None,
        address_remap: AddressRemap | None = None,
    ) -> Cluster:
        """The same as `Cluster(url, ...)`."""
        return cls(url, options=options, address_remap=address_remap)

    async def open(self) -> None:
        """Check the startup node, learn the slot map, and check every primary.

        `SetupError` (naming the URL and the fix) when the startup node cannot be
        reached or used (credentials, ACL, TLS), is not cluster-enabled, or a
        primary does not answer.
        """
        timeout = self._options.socket_timeout
        info = await probe(self._lane_at(self._endpoint.name), self._url, waited=timeout)
        if info.cluster_enabled is False:
            raise SetupError(
                "is not a Redis Cluster node (cluster_enabled:0); drop cluster=True and "
                "list every independent primary's URL instead, in one fixed order",
                url=redact(self._url),
                problem="not-cluster",
            )
        await self._load_slots()
        primaries = self.shard_names
        found = await asyncio.gather(
            *(probe(self._lane_at(n), self._node_url(n), waited=timeout) for n in primaries),
            return_exceptions=True,
        )
        for result in found:
            if isinstance(result, BaseException):
                raise result
        for name in [n for n in self._lanes if n not in primaries]:
            await self._lanes.pop(name).aclose()  # the startup node under another name

    def _node_url(self, name: str) -> str:
        """A URL for the node `name`, in the startup URL's scheme and credentials."""
        if "://" not in self._url:
            return f"redis://{name}"
        scheme, rest = self._url.split("://", 1)
        authority = rest.split("/", 1)[0]
        user = authority.rsplit("@", 1)[0] + "@" if "@" in authority else ""
        return f"{scheme}://{user}{name}"

    async def _load_slots(self) -> None:
        try:
            await self._table.load(self._ask_slots)
        except _ERRORS as exc:
            nodes = self._endpoint.name
            raise ShardUnavailable(
                f"could not load the cluster's slot map ({exc}); is it a cluster-enabled "
                "node and is the cluster up (CLUSTER INFO: cluster_state:ok)?",
                shard=nodes,
            ) from exc

    async def _ask_slots(self, node: str) -> Any:
        return await self._lane_at(node).call("CLUSTER", "SLOTS")

    @property
    def shard_names(self) -> list[str]:
        return self._table.primaries

    def slot_of(self, key: bytes) -> int:
        return keyslot(key)

    def _node(self, slot: int) -> str:
        return self._table.node_of(slot)

    def shard_of(self, key: bytes) -> str:
        return self._node(keyslot(key))

    def _by_slots(self, slots: Sequence[int]) -> dict[str, list[int]]:
        """node name -> the positions whose slot it owns (as far as we know)."""
        plan: dict[str, list[int]] = {}
        nodes: dict[int, str] = {}
        for pos, slot in enumerate(slots):
            name = nodes.get(slot)
            if name is None:
                name = nodes[slot] = self._node(slot)
            plan.setdefault(name, []).append(pos)
        return plan

    async def _pipeline(
        self,
        node: str,
        commands: list[tuple[Any, ...]],
        keys: list[bytes],
        *,
        follow: bool = True,
        resend: bool | None = None,
    ) -> list[Any]:
        """Run `commands` as one pipeline; results or per-command exceptions.

        The pipeline goes straight to the node on a plain connection: redis-py's
        cluster pipeline resolves a routing policy per command, which costs more
        than the command. Redirections are followed here too: redis-py's async
        cluster client sends ASKING and the redirected command on two pooled
        connections, which under concurrency loses the ASKING flag and loops until
        "TTL exhausted".
        """
        try:
            results = await self._lane_at(node).pipeline(commands, resend=resend)
        except _ERRORS as exc:
            err = translate(exc, node)
            return [err] * len(commands)
        redirected = [i for i, r in enumerate(results) if _redirect(r)]
        if redirected and follow:
            followed = await asyncio.gather(
                *(self._follow(commands[i], keys[i], results[i]) for i in redirected),
                return_exceptions=True,
            )
            for i, res in zip(redirected, followed, strict=True):
                results[i] = res
        return results

    async def _follow(self, cmd: tuple[Any, ...], key: bytes, error: BaseException) -> Any:
        """Follow MOVED, ASK and TRYAGAIN for one command, on one connection per hop."""
        for attempt in range(_MAX_REDIRECTS):
            if isinstance(error, MovedError):
                target, asking = self._table.moved(error.slot, error.host, error.port), False
                await self._refresh()
            elif isinstance(error, AskError):
                target, asking = self._table.address(error.host, error.port), True
            else:  # TRYAGAIN: keys of a multi-key command are split mid-migration
                await asyncio.sleep(min(0.2, 0.005 * 2**attempt))
                target, asking = self._node(keyslot(key)), False
            try:
                return await self._hop(target, cmd, asking=asking)
            except (MovedError, AskError, TryAgainError) as exc:
                error = exc
            except _ERRORS as exc:
                raise translate(exc, target) from exc
        raise ShardUnavailable(
            f"still redirected after {_MAX_REDIRECTS} hops; is a resharding stuck?",
            shard=self._safe_shard(key),
        )

    async def _hop(self, target: str, cmd: tuple[Any, ...], *, asking: bool) -> Any:
        """Send `cmd` to `target` (after ASKING on the same connection when asked to).

        The node a command is redirected to may not have stampede's script cached
        yet: an EVALSHA of a known script that meets NOSCRIPT is sent again as EVAL.
        """
        lane = self._lane_at(target)
        if asking:  # the importing node: keep no versions there (`without_keeping`)
            cmd = without_keeping(cmd)
        for command in (cmd, _as_eval(cmd)):
            if command is None:
                break
            replies = await lane.pipeline([("ASKING",), command] if asking else [command])
            reply = replies[-1]
            if not isinstance(reply, NoScriptError):
                break
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _refresh(self) -> None:
        """Reload the slot map once, however many callers met MOVED meanwhile."""
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = asyncio.ensure_future(self._reload())
        await asyncio.shield(task)

    async def _reload(self) -> None:
        await self._table.load(self._ask_slots)

    def _coalescers(self, node: str) -> tuple[Coalescer[Any, Any], Coalescer[Any, Any]]:
        pair = self._batchers.get(node)
        if pair is None:
            batch = self._options.batch_keys if self._options.coalesce else 1
            pair = self._batchers[node] = (
                Coalescer(partial(self._get_batch, node), size=len, max_items=batch),
                Coalescer(partial(self._write_batch, node), size=len, max_items=batch),
            )
        return pair

    async def fetch(self, keys: Sequence[bytes]) -> list[bytes | None]:
        plan = self._by_slots([keyslot(k) for k in keys])
        watch = READ_WATCH.get()
        if watch is not None:
            named = [(n, self._coalescers(n)[0], pos) for n, pos in plan.items()]
            return await fetch_watched(keys, named, watch)
        parts = [(self._coalescers(n)[0], pos) for n, pos in plan.items()]
        return await fetch_parts(keys, parts)

    async def _get_batch(self, node: str, requests: list[list[bytes]]) -> list[Any]:
        flat = [key for keys in requests for key in keys]
        results = await self._read_many(node, flat)
        out: list[Any] = []
        pos = 0
        for keys in requests:
            mine = results[pos : pos + len(keys)]
            pos += len(keys)
            error = next((r for r in mine if isinstance(r, BaseException)), None)
            out.append(mine if error is None else translate(error, node))
        return out

    async def _read_many(self, node: str, keys: list[bytes]) -> list[Any]:
        """Values of `keys` from `node`: one script call when the node serves them all.

        The script reads keys of many slots at once (Redis 7's allow-cross-slot-keys
        flag). While a slot migrates or after it moved, the node refuses a key it
        does not serve ("non local key") and the keys are read with one GET each,
        which follow ASK and MOVED one by one; a server without script flags (before
        7.0) always gets the GETs.
        """
        if len(keys) > 1 and node not in self._no_read_script:
            (reply,) = await self._pipeline(
                node, [("EVALSHA", _READ.sha, 0, *keys)], [keys[0]], follow=False
            )
            if isinstance(reply, NoScriptError):
                (reply,) = await self._pipeline(
                    node, [("EVAL", _READ.source, 0, *keys)], [keys[0]], follow=False
                )
            if not isinstance(reply, BaseException):
                return list(reply)
            if "non local key" not in str(reply) and not _redirect(reply):
                self._no_read_script.add(node)  # e.g. Redis 6: no script flags
        return await self._pipeline(node, [("GET", k) for k in keys], keys)

    async def write_guarded(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        *,
        version: int,
        token: str,
        expire_at_ms: int | None = None,
        limit: int = 0,
        keep_ms: int = KEEP_MS,
    ) -> WriteOutcome:
        slots = [keyslot(k) for k in keys]
        parts = [(self._coalescers(n)[1], pos) for n, pos in self._by_slots(slots).items()]
        return await write_parts(
            keys,
            values,
            parts,
            version=version,
            token=token,
            expire_at_ms=expire_at_ms,
            limit=limit,
            keep_ms=keep_ms,
            slots=slots,
        )

    async def _write_batch(self, node: str, requests: list[WriteRequest]) -> list[Any]:
        """One guarded-script call for every write of this loop turn on `node`.

        Keys of several slots go in one cross-slot call; a node that refuses it (a
        slot moving, or a server before 7.0) gets one call per slot instead.
        """
        keys, argv, slots = joined(requests)
        if slots.count(slots[0]) == len(slots):
            groups = [list(range(len(keys)))]
        else:
            if node not in self._no_write_script:
                whole = await self._guard_node(node, keys, argv)
                if whole is not None:
                    return split_codes(requests, whole, node)
            by_slot: dict[int, list[int]] = {}
            for i, slot in enumerate(slots):
                by_slot.setdefault(slot, []).append(i)
            groups = list(by_slot.values())
        results = await self._guard_calls(node, keys, argv, groups, follow=False)
        if len(results) == 1 and not isinstance(results[0], BaseException):
            return split_codes(requests, results[0], node)
        if any(_redirect(r) for r in results):
            groups, results = await self._settle_moving(node, requests, keys, argv, groups, results)
        codes: list[Any] = [None] * len(keys)
        for group, res in zip(groups, results, strict=True):
            if isinstance(res, BaseException):
                error = translate(res, node)
                for i in group:
                    codes[i] = error
            else:
                for i, code in zip(group, res, strict=True):
                    codes[i] = code
        return split_codes(requests, codes, node)

    async def _settle_moving(
        self,
        node: str,
        requests: list[WriteRequest],
        keys: list[bytes],
        argv: list[object],
        groups: list[list[int]],
        results: list[Any],
    ) -> tuple[list[list[int]], list[Any]]:
        """Resend redirected slots' keys one write at a time, following ASK and TRYAGAIN.

        A redirected slot is migrating: the keys of several writes in one call could
        be split between the two nodes (TRYAGAIN), while each write's own keys move
        together often enough to get through.
        """
        owner = [r for r, request in enumerate(requests) for _ in request.keys]
        moving = [g for g, r in zip(groups, results, strict=True) if _redirect(r)]
        alone = [
            [i for i in g if owner[i] == r] for g in moving for r in sorted({owner[i] for i in g})
        ]
        settled = await self._guard_calls(node, keys, argv, alone)
        kept = [(g, r) for g, r in zip(groups, results, strict=True) if not _redirect(r)]
        return [g for g, _ in kept] + alone, [r for _, r in kept] + settled

    async def _guard_node(
        self, node: str, keys: list[bytes], argv: list[object]
    ) -> list[Any] | None:
        """The whole batch in one cross-slot guard call; None when the node refuses it."""
        args = (len(keys), *keys, *argv)
        (reply,) = await self._pipeline(
            node, [("EVALSHA", CROSS_SLOT_GUARD_SHA, 0, *args)], [keys[0]], follow=False
        )
        if isinstance(reply, NoScriptError):
            (reply,) = await self._pipeline(
                node, [("EVAL", CROSS_SLOT_GUARD_SCRIPT, 0, *args)], [keys[0]], follow=False
            )
        if not isinstance(reply, BaseException):
            return list(reply)
        text = str(reply)
        if not ("non local key" in text or "WRONGTYPE" in text or _redirect(reply)):
            self._no_write_script.add(node)  # e.g. Redis 6: no script flags
        return None

    async def _guard_calls(
        self,
        node: str,
        keys: list[bytes],
        argv: list[object],
        groups: list[list[int]],
        *,
        follow: bool = True,
    ) -> list[Any]:
        """One guarded-script call per group of key indexes (each group in one slot)."""

        def command(op: str, body: bytes | str, group: list[int]) -> tuple[Any, ...]:
            if len(group) == len(keys):
                return (op, body, len(keys), *keys, *argv)
            n = ARGS_PER_KEY
            chosen = [arg for i in group for arg in argv[n * i : n * i + n]]
            return (op, body, len(group), *[keys[i] for i in group], *chosen)

        first_keys = [keys[g[0]] for g in groups]
        results = await self._pipeline(
            node, [command("EVALSHA", GUARD_SHA, g) for g in groups], first_keys, follow=follow
        )
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            again = await self._pipeline(
                node,
                [command("EVAL", GUARD_SCRIPT, groups[i]) for i in missing],
                [first_keys[i] for i in missing],
                follow=follow,
            )
            for i, res in zip(missing, again, strict=True):
                results[i] = res
        return results

    async def incr(self, key: bytes) -> int:
        """INCR a version counter. Resent after a lost reply: a counter only has to
        grow, and a resent INCR leaves a gap, never a repeat."""
        try:
            node = self.shard_of(key)
        except _ERRORS as exc:
            raise translate(exc, "cluster") from exc
        (result,) = await self._pipeline(node, [("INCR", key)], [key], resend=True)
        if isinstance(result, BaseException):
            raise translate(result, node) from result
        return int(result)

    async def execute(self, key: bytes, *args: Any) -> Any:
        try:
            node = self.shard_of(key)
        except _ERRORS as exc:
            raise translate(exc, "cluster") from exc
        (result,) = await self._pipeline(node, [args], [key])
        if isinstance(result, BaseException):
            raise translate(result, node) from result
        return result

    async def execute_on(self, shard: str, *args: Any) -> Any:
        """Run one command on the named primary (SCAN, INFO and the like)."""
        if shard not in self.shard_names:
            raise ConfigurationError(f"no cluster primary named {shard!r}")
        try:
            return await self._lane_at(shard).call(*args)
        except _ERRORS as exc:
            raise translate(exc, shard) from exc

    def misrouted(self, shard: str, keys: Sequence[bytes]) -> list[bytes]:
        """The keys of `keys`, found on the primary `shard`, whose slot it does not own.

        On a settled cluster there are none (the server refuses such writes); keys
        of a slot being migrated show up until the migration ends.
        """
        if shard not in self.shard_names:
            raise ConfigurationError(f"no cluster primary named {shard!r}")
        return [k for k in keys if self._safe_shard(k) != shard]

    def _single(self, keys: Sequence[bytes], what: str) -> str:
        slots = {keyslot(k) for k in keys}
        if len(slots) != 1:
            raise ConfigurationError(f"{what} needs every key in one slot")
        return self._node(slots.pop())

    async def watch_update(
        self, keys: Sequence[bytes], update: Updater, *, expire_at_ms: int | None = None
    ) -> bool:
        ok, _ = await self.optimistic(keys, updater_body(keys, update, expire_at_ms))
        return ok

    async def _on_owner(self, keys: Sequence[bytes], what: str, call: Any) -> Any:
        """Run `call(lane)` on the slot owner's lane; follow a moving slot a few times."""
        for attempt in range(_MAX_REDIRECTS):
            node = self._single(keys, what)
            try:
                return await call(self._lane_at(node))
            except (MovedError, AskError, TryAgainError):
                # Mid-migration a transaction cannot follow ASK with its keys split,
                # so wait for the slot to settle.
                await self._refresh()
                await asyncio.sleep(min(0.2, 0.005 * 2**attempt))
            except _ERRORS as exc:
                raise translate(exc, node) from exc
        raise ShardUnavailable(
            f"{what}: the slot kept moving for {_MAX_REDIRECTS} attempts",
            shard=self._single(keys, what),
        )

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
        _SCRIPTS.setdefault(script.sha, script.source)  # a redirected hop may need EVAL
        results = await self._pipeline(
            node, [("EVALSHA", script.sha, len(keys), *keys, *args)], [keys[0]]
        )
        if isinstance(results[0], NoScriptError):
            results = await self._pipeline(
                node, [("EVAL", script.source, len(keys), *keys, *args)], [keys[0]]
            )
        if isinstance(results[0], BaseException):
            raise translate(results[0], node) from results[0]
        return results[0]

    def _lane_at(self, name: str) -> Lane:
        """The connection lane to one node (the startup URL's settings, that address)."""
        lane = self._lanes.get(name)
        if lane is None:
            opts = self._options
            host, port = name.rsplit(":", 1)
            lane = self._lanes[name] = Lane(
                self._endpoint.at(host, int(port)),
                limit=opts.max_connections,
                name=name,
                retries=opts.connection_retries,
                retry_base=opts.retry_base,
                retry_cap=opts.retry_cap,
            )
        return lane

    def _safe_shard(self, key: bytes) -> str:
        try:
            return self.shard_of(key)
        except _ERRORS:
            return "cluster"

    async def aclose(self) -> None:
        for pair in self._batchers.values():
            for coalescer in pair:
                await coalescer.aclose()
        for lane in self._lanes.values():
            await lane.aclose()
