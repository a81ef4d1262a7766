"""`SentinelShards`: independent primaries whose failovers Redis Sentinel manages.

Each shard is a Sentinel *service* (a master name), in shard order. The client
asks the Sentinels (in turn, until one answers) for each service's primary with
`SENTINEL get-master-addr-by-name`, checks with `ROLE` that the address it got is
a primary, and points that shard's lane at it. It then follows failovers three
ways:

- it listens on one Sentinel for `+switch-master` (pub/sub) and moves a shard's
  lane to the new primary at once (another Sentinel when that one goes away);
- a call that meets a failed connection, a timeout, `READONLY`, `MASTERDOWN` or
  `LOADING` asks the Sentinels again (one question at a time per shard), and a
  call that is safe to resend goes again to the primary they name, with backoff,
  for up to `ConnectOptions.failover_timeout` seconds;
- every `ConnectOptions.refresh_interval` seconds it asks again anyway.

Data nodes are reached with the first Sentinel URL's credentials and TLS
settings (`data_url`, when given, supplies them instead: `redis://user:pw@/`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import hiredis

from .._backoff import backoff
from ..errors import ConfigurationError, SetupError
from ..keys import HashPolicy, SlotMap
from ..options import ConnectOptions
from ._base import TRANSPORT_ERRORS, translate
from ._checks import redact
from ._endpoint import Endpoint, parse_url
from ._lane import Lane
from ._reply_errors import (
    BusyLoadingError,
    ConnectionLost,
    MasterDownError,
    ReadOnlyError,
    ReplyTimeout,
)
from ._resp import pack
from ._shards import Shards

__all__ = ["SentinelShards"]

T = TypeVar("T")

_MOVED_ON = (ConnectionLost, OSError, ReadOnlyError, MasterDownError, BusyLoadingError)
"""What a call meets when its shard's primary is gone or demoted (a timeout too,
but a timed-out call is resent only once the shard has moved)."""


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
        if isinstance(sentinels, str) or isinstance(services, str):
            raise ConfigurationError(
                "sentinels and services are lists: sentinels=['redis://h1:26379', ...], "
                "services=['shard-a', 'shard-b', ...] (one master name per shard)"
            )
        if not sentinels or not services:
            raise ConfigurationError(
                "Sentinel needs at least one Sentinel URL and one service (master name)"
            )
        if len(set(services)) != len(services):
            raise ConfigurationError("a service is listed twice; each shard needs its own")
        opts = options or ConnectOptions()
        self._sentinel_urls = list(sentinels)
        self._services = list(services)
        self._template = parse_url(data_url or sentinels[0], opts)
        self._sentinel_lanes = [
            Lane(parse_url(u, opts), limit=4, retries=0, retry_base=opts.retry_base)
            for u in sentinels
        ]
        # Where each shard is, until open() asks: nowhere (a port nothing listens on).
        endpoints = [self._template.at("127.0.0.1", 1) for _ in services]
        urls = [f"sentinel service {name}" for name in services]
        self._build(urls, endpoints, list(services), opts, slot_map, policy)
        self._asking: dict[int, asyncio.Future[bool]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: set[asyncio.Future[Any]] = set()
        self.switches = 0
        """How many times a shard moved to another primary (tests and metrics)."""

    # -- finding the primaries ------------------------------------------------------

    async def open(self) -> None:
        """Ask the Sentinels for every service's primary, then check the servers as
        `Shards.open` does (each must be a primary); then follow failovers."""
        found = await asyncio.gather(*(self._master_of(i) for i in range(len(self._services))))
        for i, address in enumerate(found):
            if address is None:
                raise SetupError(
                    f"no Sentinel knows a primary for service {self._services[i]!r} (asked "
                    f"{', '.join(redact(u) for u in self._sentinel_urls)}); check the "
                    "service names (sentinel monitor <name> ...) and that a Sentinel is up",
                    url=redact(self._sentinel_urls[0]),
                    problem="unreachable",
                )
            self._point(i, address)
        await super().open()
        if not self._tasks:
            self._tasks.append(asyncio.create_task(self._listen()))
            if self._options.refresh_interval > 0:
                self._tasks.append(asyncio.create_task(self._poll()))

    async def _master_of(self, shard: int) -> tuple[str, int] | None:
        """(host, port) of the service's primary, from the first Sentinel that knows."""
        name = self._services[shard]
        for lane in self._sentinel_lanes:
            try:
                reply = await lane.call("SENTINEL", "get-master-addr-by-name", name)
            except TRANSPORT_ERRORS:
                continue
            if isinstance(reply, list) and len(reply) == 2:
                return _text(reply[0]), int(reply[1])
        return None

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
        """Ask the Sentinels where shard `shard` is now (one question at a time per
        shard); whether it moved. A primary that says it is a replica is not taken."""
        asking = self._asking.get(shard)
        if asking is None or asking.done():
            asking = self._asking[shard] = asyncio.ensure_future(self._relocate(shard))
        return await asyncio.shield(asking)

    async def _relocate(self, shard: int) -> bool:
        address = await self._master_of(shard)
        if address is None or not await self._is_primary(address):
            return False
        return self._point(shard, address)

    async def _is_primary(self, address: tuple[str, int]) -> bool:
        probe = Lane(self._template.at(*address), limit=1, retries=0)
        try:
            role = await probe.call("ROLE")
        except TRANSPORT_ERRORS:
            return False
        finally:
            await probe.aclose()
        return isinstance(role, list) and bool(role) and _text(role[0]) == "master"

    # -- following failovers --------------------------------------------------------

    async def _call(self, shard: int, call: Callable[[], Awaitable[T]], *, safe: bool) -> T:
        """`call()` on shard `shard`; after a sign that its primary moved, ask the
        Sentinels again and, when `safe`, send it again (see the module)."""
        deadline: float | None = None
        attempt = 0
        while True:
            try:
                return await call()
            except TRANSPORT_ERRORS as exc:
                timed_out = isinstance(exc, ReplyTimeout | TimeoutError)
                if not (timed_out or isinstance(exc, _MOVED_ON)):
                    raise translate(exc, self._names[shard]) from exc
                moved = await self._ask_again(shard)
                if deadline is None:
                    deadline = time.monotonic() + self._options.failover_timeout
                if not safe or (timed_out and not moved) or time.monotonic() >= deadline:
                    raise translate(exc, self._names[shard]) from exc
            await asyncio.sleep(
                backoff(attempt, self._options.retry_base, min(0.25, self._options.retry_cap))
            )
            attempt += 1

    async def _listen(self) -> None:
        """Follow `+switch-master` on one Sentinel after another, for good; each time it
        (re)subscribes it asks about every shard, in case it missed a switch."""
        attempt = 0
        while True:
            for endpoint in [lane.endpoint for lane in self._sentinel_lanes]:
                for shard in range(len(self._services)):
                    self._spawn(self._ask_again(shard))
                with contextlib.suppress(*TRANSPORT_ERRORS, OSError, hiredis.ProtocolError):
                    await self._subscribe(endpoint)
                    attempt = 0
                await asyncio.sleep(backoff(attempt, 0.05, 1.0))
                attempt += 1

    async def _subscribe(self, endpoint: Endpoint) -> None:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=endpoint.tls),
            endpoint.connect_timeout,
        )
        try:
            hello: list[tuple[Any, ...]] = []
            if endpoint.password is not None:
                user = (endpoint.username,) if endpoint.username else ()
                hello.append(("AUTH", *user, endpoint.password))
            hello.append(("SUBSCRIBE", "+switch-master"))
            writer.write(pack(hello))
            parser = hiredis.Reader()
            while data := await reader.read(65536):
                parser.feed(data)
                while (message := parser.gets()) is not False:
                    self._switched(message)
        finally:
            writer.close()

    def _switched(self, message: Any) -> None:
        """A `+switch-master` message: `<name> <old ip> <old port> <new ip> <new port>`."""
        if not isinstance(message, list) or len(message) != 3 or message[0] != b"message":
            return
        parts = _text(message[2]).split()
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
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        for lane in self._sentinel_lanes:
            await lane.aclose()
        await super().aclose()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
