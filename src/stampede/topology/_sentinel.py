"""`SentinelShards`: independent primaries whose failovers Redis Sentinel manages.

Each shard is a Sentinel *service* (a master name), in shard order. The client
asks every Sentinel at once for each service's primary (`SENTINEL MASTER` for its
`config-epoch`, `SENTINEL get-master-addr-by-name` for the address) and believes
the newest configuration: a Sentinel that has not yet heard of a failover is
outvoted by the one that made it, and the client never goes back to an older
configuration than the one it follows unless every Sentinel says so. It checks
with `ROLE` that the address is a primary and points that shard's lane at it (in
the middle of a failover, `open()` waits for one, within `failover_timeout`). It
then follows failovers four ways:

- it listens on every Sentinel for `+switch-master` (pub/sub; the first Sentinel
  to know tells), asks again at once and moves the shard's lane: its connections
  to the old primary are closed, those held by transactions too. A subscription
  is PINGed when quiet, and made again (asking about every shard) when it ends;
- once a connection to a shard's primary was lost or refused, the lane asks the
  Sentinels again before it opens the next one (`Lane.check`), and opens it only
  where they confirm the primary (the newest configuration names it, they do not
  hold it down, and it answers `ROLE` as a primary): it never reconnects blindly
  to an old primary that came back as an empty primary at its address, not even
  when no Sentinel answers or the primary they name does not answer yet;
- a call that meets a failed connection, a timeout, `READONLY`, `MASTERDOWN` or
  `LOADING` asks the Sentinels again, and a call that is safe to resend goes again
  to the primary they name, with backoff, for up to
  `ConnectOptions.failover_timeout` seconds (after a timeout: once the shard moved
  or its primary answers a quick PING again);
- every `ConnectOptions.refresh_interval` seconds it asks again anyway.

Questions are asked one at a time per shard, and whoever asks gets an answer to a
question put after it asked (news that arrives meanwhile makes the shard ask once
more), so a `+switch-master` is never answered by a question begun before it.

Data nodes are reached with the first Sentinel URL's credentials and TLS
settings, or `data_url`'s when given (a URL without a host: `redis://user:pw@`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import hiredis

from .._backoff import backoff
from ..keys import HashPolicy, SlotMap
from ..options import ConnectOptions
from ._base import TRANSPORT_ERRORS, translate
from ._endpoint import Endpoint, parse_url
from ._lane import Lane
from ._node_ops import pings
from ._reply_errors import (
    BusyLoadingError,
    ConnectionLost,
    MasterDownError,
    ReadOnlyError,
    ReplyTimeout,
)
from ._resp import pack
from ._sentinel_ask import (
    ask,
    data_template,
    is_primary,
    is_subscribed,
    listed,
    primary_or_not_yet,
    text,
    unanswered,
)
from ._shards import Shards

__all__ = ["SentinelShards"]

T = TypeVar("T")

_QUIET = 5.0
"""Seconds a Sentinel subscription may stay silent before it is PINGed; one that
stays silent as long again is dropped and made again."""

_MOVED_ON = (ConnectionLost, OSError, ReadOnlyError, MasterDownError, BusyLoadingError)
"""What a call meets when its shard's primary is gone or demoted (a timeout too,
but a timed-out call is resent only once the shard moved or its primary answers)."""


class SentinelShards(Shards):
    """Independent primaries found through Redis Sentinel (see the module)."""

    def __init__(
        self,
        sentinels: Sequence[str],
        services: Sequence[str],
        *,
        slot_map: SlotMap | None = None,
        policy: HashPolicy | None = None,
        options: ConnectOptions | None = None,
        data_url: str | None = None,
    ) -> None:
        sentinels, services = listed(sentinels, services)
        opts = options or ConnectOptions()
        self._sentinel_urls = list(sentinels)
        self._services = list(services)
        self._template = data_template(data_url, sentinels[0], opts)
        self._sentinel_lanes = [
            Lane(parse_url(u, opts), limit=4, retries=0, retry_base=opts.retry_base)
            for u in sentinels
        ]
        # Where each shard is, until open() asks: nowhere (a port nothing listens on).
        endpoints = [self._template.at("127.0.0.1", 1) for _ in services]
        urls = [f"sentinel service {name}" for name in services]
        self._build(urls, endpoints, list(services), opts, slot_map, policy)
        for shard, lane in enumerate(self._lanes):
            lane.check = partial(self._recheck, shard)
        self._asking: dict[int, asyncio.Future[bool]] = {}
        self._stale: set[int] = set()  # shards whose question came before the news
        self._epochs: dict[int, int] = {}  # config-epoch of where each lane points
        self._unsure: dict[int, bool] = {}  # the last question confirmed no primary
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[Any]] = set()
        self.switches = 0
        """How many times a shard moved to another primary (tests and metrics)."""

    # -- finding the primaries ------------------------------------------------------

    async def open(self) -> None:
        """Ask the Sentinels for every service's primary (waiting, within
        `failover_timeout`, through a failover under way: `_find`), then check the
        servers as `Shards.open` does (each must be a primary); then follow failovers."""
        for lane in self._sentinel_lanes:
            lane.reopen()  # (after an `aclose`)
        deadline = time.monotonic() + self._options.failover_timeout
        finds = [asyncio.ensure_future(self._find(i, deadline)) for i in range(len(self._lanes))]
        try:
            await asyncio.gather(*finds)
        finally:  # one shard refused: the others stop asking
            for find in finds:
                find.cancel()
        await super().open()
        if not self._tasks:
            for lane in self._sentinel_lanes:
                self._tasks.append(asyncio.create_task(self._listen(lane.endpoint)))
            if self._options.refresh_interval > 0:
                self._tasks.append(asyncio.create_task(self._poll()))

    async def _find(self, shard: int, deadline: float) -> None:
        """Point shard `shard`'s lane at its primary, for `open()`. As a call does, it
        waits (until `deadline`: `failover_timeout`) while a failover is under way:
        while the Sentinels hold the primary down or fail it over, or the one they
        name does not answer as a primary (dead, paused, still a replica: no replica
        promoted yet, or Sentinels that have not seen the death). Then the newest
        answer is taken, and `open()`'s checks report what is still wrong with it."""
        attempt = 0
        while True:
            answer = await self._master_of(shard)
            if answer is None:
                name = self._services[shard]
                raise await unanswered(self._sentinel_lanes, self._sentinel_urls, name)
            epoch, address, _, down = answer
            if time.monotonic() >= deadline:
                break
            if not down and await primary_or_not_yet(self._template.at(*address)) is not False:
                break  # a primary, or a refusal no waiting mends (credentials, ACL, TLS)
            await asyncio.sleep(backoff(attempt, self._options.retry_base, 0.25))
            attempt += 1
        self._epochs[shard] = epoch
        self._point(shard, address)

    async def _master_of(self, shard: int) -> tuple[int, tuple[str, int], bool, bool] | None:
        """(config-epoch, (host, port), whether every Sentinel agrees, whether it is held
        down) of the service's primary, from every Sentinel at once: the newest
        configuration wins. Held down: the Sentinels hold it down (`o_down`), fail it
        over, or name two addresses under the newest epoch (a failover under way)."""
        name = self._services[shard]
        answers = await asyncio.gather(*(ask(lane, name) for lane in self._sentinel_lanes))
        known = [a for a in answers if a is not None]
        if not known:
            return None
        epoch, address, _ = max(known, key=lambda a: a[0])  # a tie: the first in list order
        unanimous = len(known) == len(answers) and all(a[1] == address for a in known)
        newest = [a for a in known if a[0] == epoch]
        # Sentinels that name two addresses under one epoch: a failover is under way (its
        # leader names the promoted replica before the new epoch is published): unsettled
        split = len({a[1] for a in newest}) > 1
        down = split or any(a[2] for a in newest if a[1] == address)
        return epoch, address, unanimous, down

    def _point(self, shard: int, address: tuple[str, int]) -> bool:
        """Move shard `shard`'s lane to `address`; whether it moved."""
        lane = self._lanes[shard]
        current = (lane.endpoint.host, lane.endpoint.port)
        if current == address:
            return False
        lane.repoint(self._template.at(*address))
        self._urls[shard] = f"redis://{address[0]}:{address[1]}"
        self.switches += 1
        return True

    async def _ask_again(self, shard: int) -> bool:
        """Ask the Sentinels where shard `shard` is now; whether it moved. One question
        at a time per shard, and the answer is to a question put after this call. A
        primary that says it is a replica is not taken."""
        self._stale.add(shard)
        asking = self._asking.get(shard)
        if asking is None or asking.done():
            asking = self._asking[shard] = asyncio.ensure_future(self._relocate(shard))
        return await asyncio.shield(asking)

    async def _recheck(self, shard: int) -> None:
        """`Lane.check`: before the lane reconnects after a loss. Unless the Sentinels
        confirm a primary now (see `_relocate_once`), the lane does not reconnect: the
        process at its address may be the old primary restarted empty, which the
        Sentinels will demote. The call fails as a lost connection, and is resent to
        the primary they confirm, once they do."""
        confirmed = False
        with contextlib.suppress(*TRANSPORT_ERRORS):
            await self._ask_again(shard)
            confirmed = not self._unsure.get(shard, True)
        if not confirmed:
            raise ConnectionLost(
                f"the Sentinels confirm no primary of {self._services[shard]} now (it is "
                "held down or failing over, no Sentinel answered, or the one they name "
                "does not answer as a primary yet); waiting until they do"
            )

    async def _relocate(self, shard: int) -> bool:
        moved = False
        while shard in self._stale:
            self._stale.discard(shard)
            moved = await self._relocate_once(shard) or moved
        return moved

    async def _relocate_once(self, shard: int) -> bool:
        """Ask once; point the lane at the primary the Sentinels confirm. Whether they
        confirmed one is kept for `_recheck`: not when no Sentinel answered, when they
        hold the primary down or fail it over, or when the one they name does not
        answer `ROLE` as a primary; yes when the answer is older than the
        configuration the lane follows (a Sentinel that has not heard of the last
        failover yet: the lane stays where the newer one put it)."""
        self._unsure[shard] = True
        answer = await self._master_of(shard)
        if answer is None:
            return False
        epoch, address, unanimous, down = answer
        if epoch < self._epochs.get(shard, -1) and not unanimous:
            self._unsure[shard] = False
            return False
        if down or not await is_primary(self._template.at(*address)):
            return False
        self._unsure[shard] = False
        self._epochs[shard] = epoch
        return self._point(shard, address)

    # -- following failovers --------------------------------------------------------

    async def _call(self, shard: int, call: Callable[[], Awaitable[T]], *, safe: bool) -> T:
        """`call()` on shard `shard`; after a sign that its primary moved, ask the
        Sentinels again and, when `safe`, send it again (see the module). A safe call
        that timed out goes again once the shard moved or its primary answers again
        (it was paused), within `failover_timeout`: it waits through the election."""
        deadline: float | None = None
        attempt = 0
        lane = self._lanes[shard]
        while True:
            endpoint = lane.endpoint
            try:
                return await call()
            except TRANSPORT_ERRORS as exc:
                timed_out = isinstance(exc, ReplyTimeout | TimeoutError)
                if not (timed_out or isinstance(exc, _MOVED_ON)):
                    raise translate(exc, self._names[shard]) from exc
                await self._ask_again(shard)
                if deadline is None:
                    deadline = time.monotonic() + self._options.failover_timeout
                if not safe or time.monotonic() >= deadline:
                    raise translate(exc, self._names[shard]) from exc
                if timed_out and not await self._resumed(shard, endpoint, deadline):
                    raise translate(exc, self._names[shard]) from exc
            await asyncio.sleep(
                backoff(attempt, self._options.retry_base, min(0.25, self._options.retry_cap))
            )
            attempt += 1

    async def _resumed(self, shard: int, endpoint: Endpoint, deadline: float) -> bool:
        """After a timeout at `endpoint`: wait until the shard moved away from it (the
        Sentinels asked again meanwhile) or it answers a quick PING; False at `deadline`."""
        lane = self._lanes[shard]
        attempt = 0
        while lane.endpoint is endpoint and not await pings(lane):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(backoff(attempt, self._options.retry_base, 0.25))
            attempt += 1
            with contextlib.suppress(*TRANSPORT_ERRORS):
                await self._ask_again(shard)
        return True

    async def _listen(self, endpoint: Endpoint) -> None:
        """Follow `+switch-master` on one Sentinel, for good (every Sentinel has its
        own listener): subscribe again, with backoff, whenever the subscription ends."""
        attempt = 0
        while True:
            with contextlib.suppress(*TRANSPORT_ERRORS, OSError, hiredis.ProtocolError):
                if await self._subscribe(endpoint):
                    attempt = 0
            await asyncio.sleep(backoff(attempt, 0.05, 1.0))
            attempt += 1

    async def _subscribe(self, endpoint: Endpoint) -> bool:
        """Listen until the connection ends; whether the subscription was made. Once
        it is, every shard is asked about (a switch may have come before it)."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=endpoint.tls),
            endpoint.connect_timeout,
        )
        subscribed = pinged = False
        try:
            hello: list[tuple[Any, ...]] = []
            if endpoint.password is not None:
                user = (endpoint.username,) if endpoint.username else ()
                hello.append(("AUTH", *user, endpoint.password))
            hello.append(("SUBSCRIBE", "+switch-master"))
            writer.write(pack(hello))
            parser = hiredis.Reader()
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(65536), _QUIET)
                except TimeoutError:
                    if pinged:
                        return subscribed  # a Sentinel that no longer answers
                    writer.write(pack([("PING",)]))
                    pinged = True
                    continue
                if not data:
                    return subscribed
                pinged = False
                parser.feed(data)
                while (message := parser.gets()) is not False:
                    if not subscribed and is_subscribed(message):
                        subscribed = True
                        for shard in range(len(self._services)):
                            self._spawn(self._ask_again(shard))
                    self._switched(message)
        finally:
            writer.close()

    def _switched(self, message: Any) -> None:
        """A `+switch-master` message: `<name> <old ip> <old port> <new ip> <new port>`;
        the Sentinels are asked at once (the newest configuration wins there too)."""
        if not isinstance(message, list) or len(message) != 3 or message[0] != b"message":
            return
        parts = text(message[2]).split()
        if len(parts) == 5 and parts[0] in self._services:
            self._spawn(self._ask_again(self._services.index(parts[0])))

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run `work` in the background (collected by `aclose`)."""
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled():
            task.exception()  # asked again later; nothing to report here

    async def _poll(self) -> None:
        """Ask the Sentinels every `refresh_interval` seconds, whatever happened."""
        while True:
            await asyncio.sleep(self._options.refresh_interval)
            for shard in range(len(self._services)):
                with contextlib.suppress(*TRANSPORT_ERRORS):
                    await self._ask_again(shard)

    async def aclose(self) -> None:
        tasks: list[asyncio.Future[Any]] = [*self._tasks, *self._pending, *self._asking.values()]
        self._tasks = []
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                await asyncio.wait(tasks, timeout=2.0)
        finally:  # the lanes closed even if that is cancelled
            for lane in self._sentinel_lanes:
                await lane.aclose()
            await super().aclose()
