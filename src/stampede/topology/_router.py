"""Routing inside a Redis Cluster: a lane to each node, and MOVED / ASK / TRYAGAIN.

`Router.pipeline` sends commands to one node as one pipeline and follows the
redirections of the commands that meet one, command by command: MOVED updates the
slot map (and reloads it once), ASK sends ASKING and the command on one
connection of the importing node, TRYAGAIN waits for the migrating slot. The node
a command is redirected to may not have stampede's script cached yet: an EVALSHA
of a known script that meets NOSCRIPT goes again as EVAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .._backoff import backoff
from ..errors import OutcomeUnknownError, ShardError, ShardTimeout, ShardUnavailable
from ..keys import keyslot
from ..options import ConnectOptions
from ._base import translate
from ._discovery import SlotsUnknown, SlotTable
from ._endpoint import Endpoint
from ._floor import after_ask
from ._guard import without_keeping
from ._lane import Lane, Sent
from ._node_ops import eval_fallback, pings
from ._resp import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    MovedError,
    ReadOnlyError,
    RedisError,
    TryAgainError,
)
from ._retries import is_idempotent

__all__ = ["ERRORS", "TRANSIENT", "Router", "failing", "redirected"]

T = TypeVar("T")

ERRORS = (RedisError, OSError, TimeoutError)
_MAX_REDIRECTS = 16


def redirected(result: Any) -> bool:
    """True for a reply that says the command belongs elsewhere (or later)."""
    return isinstance(result, MovedError | AskError | TryAgainError)


TRANSIENT = (ClusterDownError, ReadOnlyError, BusyLoadingError, MasterDownError)
"""Replies of a node in a passing state: the cluster electing, a primary demoted to a
replica, a restarted node loading, a replica cut off from its primary."""


def failing(result: Any) -> bool:
    """True for a result that says the node failed or is in a passing state: the map
    may be stale, and a command safe to resend may go again."""
    return isinstance(result, (ShardUnavailable, ShardTimeout, *TRANSIENT))


def _quiet(task: asyncio.Future[None]) -> None:
    """Retrieve a background reload's error (the next caller meets it again)."""
    if not task.cancelled():
        task.exception()


class Router:
    """The lanes to a cluster's nodes and the slot map they are chosen by."""

    def __init__(self, endpoint: Endpoint, table: SlotTable, options: ConnectOptions) -> None:
        self.endpoint = endpoint
        self.table = table
        self.options = options
        self.lanes: dict[str, Lane] = {}
        self.closed = False  # its lanes open no connection (`Lane.closed`)
        self._refreshing: asyncio.Future[None] | None = None
        self.reloads = 0
        """How many times the slot map was loaded (tests and metrics)."""

    def node(self, slot: int) -> str:
        """The primary serving `slot`. A slot with no owner in the map (reloaded while
        the cluster elects a new primary, or a slot no node serves) raises
        `ShardUnavailable` naming it, and reloads the map in the background."""
        try:
            return self.table.node_of(slot)
        except SlotsUnknown as exc:
            if self.table.loaded:
                self.stale("")
            raise ShardUnavailable(
                f"{exc}: the cluster may be electing a new primary, or the slot is "
                "unassigned (CLUSTER SLOTS); retry once a node serves it",
                shard="cluster",
            ) from exc

    def shard_of(self, key: bytes) -> str:
        return self.node(keyslot(key))

    def by_slots(self, slots: Sequence[int]) -> dict[str, list[int]]:
        """node name -> the positions whose slot it owns (as far as we know)."""
        plan: dict[str, list[int]] = {}
        nodes: dict[int, str] = {}
        for pos, slot in enumerate(slots):
            name = nodes.get(slot)
            if name is None:
                name = nodes[slot] = self.node(slot)
            plan.setdefault(name, []).append(pos)
        return plan

    async def pipeline(
        self,
        node: str,
        commands: list[tuple[Any, ...]],
        keys: list[bytes],
        *,
        follow: bool = True,
        resend: bool | None = None,
        first: Sent | None = None,
    ) -> list[Any]:
        """Run `commands` as one pipeline on `node`; results or per-command exceptions.

        `keys[i]` is a key of command i (where its redirection is looked up). With
        `follow`, a command redirected by MOVED, ASK or TRYAGAIN is sent on to where
        it belongs, command by command. A node that fails (connection, timeout) or
        answers with a transient state (CLUSTERDOWN, READONLY, LOADING, MASTERDOWN)
        makes the slot map reload; the commands that are safe to resend are sent
        again, to the slot's owner as the map now says, with backoff, for up to
        `failover_timeout` seconds (see `failover`). `first`: the pipeline's first
        attempt on `node`, already made (`Lane.send_now`).
        """
        results = await self._send(node, commands, resend, first)
        if self.options.failover_timeout > 0:
            failed = [i for i, r in enumerate(results) if failing(r)]
            safe = [i for i in failed if resend or is_idempotent(commands[i])]
            if safe:
                await self.failover(node, commands, keys, results, safe)
        moved = [i for i, r in enumerate(results) if redirected(r)]
        if moved and follow:
            followed = await asyncio.gather(
                *(self.follow(commands[i], keys[i], results[i]) for i in moved),
                return_exceptions=True,
            )
            for i, res in zip(moved, followed, strict=True):
                results[i] = res
        return results

    async def _send(
        self,
        node: str,
        commands: list[tuple[Any, ...]],
        resend: bool | None,
        first: Sent | None = None,
    ) -> list[Any]:
        try:
            results = await self.lane_at(node).pipeline(commands, resend=resend, first=first)
        except ERRORS as exc:
            self.stale(node)
            return [translate(exc, node)] * len(commands)
        except OutcomeUnknownError:
            self.stale(node)  # a lost reply, not resent: the node may be failing over
            raise
        if any(failing(r) for r in results):
            self.stale(node)
        return results

    async def failover(
        self,
        node: str,
        commands: list[tuple[Any, ...]],
        keys: list[bytes],
        results: list[Any],
        positions: list[int],
    ) -> None:
        """Send `commands[positions]` again until they get through or the failover
        window ends: reload the slot map (from any node), send each to its slot's
        owner, back off. A timed-out command goes to the node it timed out at again
        only once that node answers a quick PING (a paused node would make it wait out
        the socket timeout again; one that resumed, still owning the slot, takes it)."""
        deadline = time.monotonic() + self.options.failover_timeout
        tried_at = dict.fromkeys(positions, node)
        attempt = 0
        while positions and time.monotonic() < deadline:
            answers: dict[str, bool] = {}
            await asyncio.sleep(
                backoff(attempt, self.options.retry_base, min(0.25, self.options.retry_cap))
            )
            attempt += 1
            try:
                await self.refresh(avoid=node)
            except ERRORS:
                continue
            plan: dict[str, list[int]] = {}
            for i in positions:
                try:
                    target = self.shard_of(keys[i])
                except ShardUnavailable:
                    continue  # no node serves its slot yet: the next round
                if isinstance(results[i], ShardTimeout) and target == tried_at[i]:
                    if target not in answers:
                        answers[target] = await self.answers(target)
                    if not answers[target]:
                        continue
                plan.setdefault(target, []).append(i)
            for target, chosen in plan.items():
                got = await self._send(target, [commands[i] for i in chosen], True)
                for i, reply in zip(chosen, got, strict=True):
                    results[i] = reply
                    tried_at[i] = target
            positions = [i for i in positions if failing(results[i])]

    async def answers(self, node: str) -> bool:
        """Whether `node` answers a PING in time, on a connection of its own (`pings`)."""
        return await pings(self.lane_at(node))

    def stale(self, node: str) -> None:
        """The map may be out of date (`node` failed): reload it in the background."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self.reload(avoid=node))
            self._refreshing.add_done_callback(_quiet)

    def runner(
        self, node: str, keys: Sequence[bytes], *, follow: bool = True, first: Sent | None = None
    ) -> Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]]:
        """`pipeline` on `node` as a `Run` for `eval_fallback` (`keys[i]`, or the last
        key, locates command i; `first`: the first run's first attempt, already made)."""

        async def run(commands: list[tuple[Any, ...]]) -> list[Any]:
            located = [keys[min(i, len(keys) - 1)] for i in range(len(commands))]
            return await self.pipeline(node, commands, located, follow=follow, first=first)

        return run

    async def follow(self, cmd: tuple[Any, ...], key: bytes, error: BaseException) -> Any:
        """Follow MOVED, ASK and TRYAGAIN for one command, on one connection per hop."""
        for attempt in range(_MAX_REDIRECTS):
            if isinstance(error, MovedError):
                target, asking = self.table.moved(error.slot, error.host, error.port), False
                with contextlib.suppress(*ERRORS):  # a failed reload: MOVED says enough
                    await self.refresh()
            elif isinstance(error, AskError):
                target, asking = self.table.address(error.host, error.port), True
            else:  # TRYAGAIN: keys of a multi-key command are split mid-migration
                await asyncio.sleep(min(0.2, 0.005 * 2**attempt))
                target, asking = self.node(keyslot(key)), False
            try:
                return await self.hop(target, cmd, asking=asking)
            except (MovedError, AskError, TryAgainError) as exc:
                error = exc
            except ERRORS as exc:
                raise translate(exc, target) from exc
        raise ShardUnavailable(
            f"still redirected after {_MAX_REDIRECTS} hops; is a resharding stuck?",
            shard=self.safe_shard(key),
        )

    async def on_owner(
        self, locate: Callable[[], str], what: str, call: Callable[[Lane], Awaitable[T]]
    ) -> T:
        """`call(lane)` on the lane of `locate()`, the owner of a call's slot, for a call
        that cannot follow a redirection or be resent (MULTI/EXEC, WATCH): a moving slot
        (its marker, a new key, is asked away mid-migration) is waited for (`settle`),
        `failover_timeout` s and at least 16 tries. What else it meets is raised, as its
        `ShardError` (`OutcomeUnknownError` as it is); when the node failed, is passing
        or lost the reply, the map reloads in the background (`failed`)."""
        loop = asyncio.get_running_loop()
        until, attempt = loop.time() + self.options.failover_timeout, 0
        while True:
            node = locate()
            try:
                return await call(self.lane_at(node))
            except (MovedError, AskError, TryAgainError) as exc:
                attempt += 1
                if attempt >= _MAX_REDIRECTS and loop.time() >= until:
                    raise ShardUnavailable(
                        f"{what}: the slot kept moving for {attempt} attempts", shard=node
                    ) from exc
                await self.settle(exc)
                await asyncio.sleep(min(0.2, 0.005 * 2**attempt))
            except OutcomeUnknownError:
                self.stale(node)
                raise
            except ERRORS as exc:
                raise self.failed(node, exc) from exc

    def failed(self, node: str, exc: BaseException) -> ShardError:
        """The `ShardError` for `exc`, met on `node` by a call that is not sent again;
        when it says the node failed or is passing, the map reloads in the background
        (the next call goes where the reloaded map says: a promoted replica)."""
        error = translate(exc, node)
        if failing(exc) or failing(error):
            self.stale(node)
        return error

    async def settle(self, error: BaseException) -> None:
        """After a redirection of a call that cannot follow it (MULTI/EXEC, WATCH): the
        owner a MOVED names, then the map reloaded. A reload that fails (no node
        answers CLUSTER SLOTS) leaves the map as MOVED left it: the caller tries again
        as it would, and fails with its own `ShardError`, never the reload's."""
        if isinstance(error, MovedError):
            self.table.moved(error.slot, error.host, error.port)
        with contextlib.suppress(*ERRORS):
            await self.refresh()

    async def hop(self, target: str, cmd: tuple[Any, ...], *, asking: bool) -> Any:
        """Send `cmd` to `target` (after ASKING on the same connection when asked to).

        The node a command is redirected to may not have stampede's script cached
        yet: an EVALSHA of a known script that meets NOSCRIPT is sent again as EVAL.
        """
        lane = self.lane_at(target)
        if asking:  # the importing node: keep no versions there (`without_keeping`)
            cmd = without_keeping(cmd)

        async def run(commands: list[tuple[Any, ...]]) -> list[Any]:
            if not asking:
                return await lane.pipeline(commands)
            return (await lane.pipeline([("ASKING",), *commands]))[1:]

        (reply,) = await eval_fallback(run, [cmd])
        if isinstance(reply, BaseException):
            raise reply
        return after_ask(cmd, reply) if asking else reply

    async def refresh(self, *, avoid: str | None = None) -> None:
        """Reload the slot map once, however many callers met MOVED (or a failed node)
        meanwhile: one reload at a time."""
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = asyncio.ensure_future(self.reload(avoid=avoid))
            task.add_done_callback(_quiet)
        await asyncio.shield(task)

    async def reload(self, *, avoid: str | None = None) -> None:
        self.reloads += 1
        await self.table.load(self.ask_slots, avoid=avoid)

    async def ask_slots(self, node: str) -> Any:
        return await self.lane_at(node).call("CLUSTER", "SLOTS")

    def lane_at(self, name: str) -> Lane:
        """The connection lane to one node (the startup URL's settings, that address)."""
        lane = self.lanes.get(name)
        if lane is None:
            opts = self.options
            host, port = name.rsplit(":", 1)
            lane = self.lanes[name] = Lane(
                self.endpoint.at(host, int(port)),
                limit=opts.max_connections,
                name=name,
                retries=opts.connection_retries,
                retry_base=opts.retry_base,
                retry_cap=opts.retry_cap,
            )
            lane.closed = self.closed  # (a call in flight when the client was closed)
        return lane

    def safe_shard(self, key: bytes) -> str:
        """The node of `key` for an error message ("cluster" when the map is unknown)."""
        try:
            return self.shard_of(key)
        except ERRORS:
            return "cluster"

    def reopen(self) -> None:
        self.closed = False
        for lane in self.lanes.values():
            lane.reopen()

    async def aclose(self) -> None:
        """Close every lane, then wait for a reload in flight (which, its lanes closed,
        ends at once): no task of this client outlives it."""
        self.closed = True
        lanes, self.lanes = list(self.lanes.values()), {}
        for lane in lanes:
            await lane.aclose()
        task = self._refreshing
        if task is not None and not task.done():
            await asyncio.wait([task])  # (not cancelled: callers may be waiting on it)
