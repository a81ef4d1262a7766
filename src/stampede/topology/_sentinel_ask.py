"""Questions to one Sentinel (`SentinelShards`), and why none answered at `open()`.

`ask` is one Sentinel's word on a service: its configuration epoch, the address of
its primary and whether it holds that primary down; None when it cannot say.
`is_primary` asks a data node its `ROLE`; `primary_or_not_yet` says too whether
waiting may help (`open()` during a failover).
`unanswered` turns a service no Sentinel named into the `SetupError` that says
why: a service the Sentinels that answered do not monitor, or, when none
answered, the first Sentinel's own refusal (its credentials, its ACL, TLS, a
timeout, nothing listening), as `open()` reports a data node's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigurationError, SetupError
from ..options import ConnectOptions
from ._base import TRANSPORT_ERRORS
from ._checks import redact, refusal
from ._endpoint import Endpoint, parse_url
from ._lane import Lane

__all__ = [
    "ask",
    "data_template",
    "is_primary",
    "is_subscribed",
    "listed",
    "primary_or_not_yet",
    "text",
    "unanswered",
]


async def ask(lane: Lane, name: str) -> tuple[int, tuple[str, int], bool] | None:
    """One Sentinel's (config-epoch, address, held down) of service `name`, or None. The
    epoch is -1 when this Sentinel will not say (`SENTINEL MASTER` refused by an ACL);
    "held down": its flags say the quorum holds that primary down (`o_down`) or a
    failover of it is under way."""
    try:
        master, address = await lane.pipeline(
            [("SENTINEL", "MASTER", name), ("SENTINEL", "get-master-addr-by-name", name)],
            resend=True,  # questions: a lost reply is a Sentinel that did not answer
        )
    except TRANSPORT_ERRORS:
        return None
    if not isinstance(address, list) or len(address) != 2:
        return None
    epoch, down = -1, False
    if isinstance(master, list):
        fields = dict(zip(master[::2], master[1::2], strict=False))
        with contextlib.suppress(TypeError, ValueError):
            epoch = int(fields.get(b"config-epoch", -1))
        flags = set(text(fields.get(b"flags", b"")).split(","))
        down = bool(flags & {"o_down", "failover_in_progress"})
    try:
        return epoch, (text(address[0]), int(address[1])), down
    except (TypeError, ValueError):
        return None


async def is_primary(endpoint: Endpoint) -> bool:
    """Whether the server at `endpoint` answers `ROLE` as a primary (on a connection of
    its own, closed after)."""
    return await primary_or_not_yet(endpoint) is True


async def primary_or_not_yet(endpoint: Endpoint) -> bool | None:
    """True when the server at `endpoint` answers `ROLE` as a primary; False when it
    does not yet (a replica, down, paused, loading: what a failover passes through);
    None when it refuses the client in a way no failover mends (its credentials, an
    ACL, TLS), which `open()` reports at once."""
    probe = Lane(endpoint, limit=1, retries=0)
    try:
        role = await probe.call("ROLE")
    except TRANSPORT_ERRORS as exc:
        kind = refusal(exc, f"{'rediss' if endpoint.tls else 'redis'}://{endpoint.name}")
        return False if kind.problem in ("unreachable", "timeout") else None
    finally:
        await probe.aclose()
    return isinstance(role, list) and bool(role) and text(role[0]) == "master"


async def _why_not(lane: Lane, name: str) -> BaseException | None:
    """What this Sentinel says of service `name`: None when it answers without naming
    a primary (it does not monitor that name), else what stopped it answering."""
    try:
        (address,) = await lane.pipeline(
            [("SENTINEL", "get-master-addr-by-name", name)], resend=True
        )
    except TRANSPORT_ERRORS as exc:
        return exc
    return address if isinstance(address, BaseException) else None


async def unanswered(lanes: Sequence[Lane], urls: Sequence[str], name: str) -> SetupError:
    """The `SetupError` for service `name`, which no Sentinel named a primary for (see
    the module); `urls[i]` is the URL of `lanes[i]`."""
    said = await asyncio.gather(*(_why_not(lane, name) for lane in lanes))
    asked = ", ".join(redact(u) for u in urls)
    failed = [(url, why) for url, why in zip(urls, said, strict=True) if why is not None]
    if len(failed) < len(urls):
        return SetupError(
            f"no Sentinel knows a primary for service {name!r} (asked {asked}); check the "
            "service names (sentinel monitor <name> ...) and that a Sentinel is up",
            url=redact(next(u for u, why in zip(urls, said, strict=True) if why is None)),
            problem="unreachable",
        )
    refusals = [refusal(why, url) for url, why in failed]
    # the most telling: credentials, an ACL or TLS before nothing listening
    first = next((r for r in refusals if r.problem != "unreachable"), refusals[0])
    return SetupError(
        f"no Sentinel could be asked about service {name!r} ({len(urls)} asked); "
        f"{str(first).removeprefix(first.url + ': ')}",
        url=first.url,
        problem=first.problem,
    )


_USAGE = (
    "sentinels=['redis://h1:26379', ...], services=['shard-a', 'shard-b', ...] (one master "
    "name per shard)"
)


def listed(sentinels: Any, services: Any) -> tuple[list[str], list[str]]:
    """The Sentinel URLs and the service names as lists (any iterable, read once),
    checked: `ConfigurationError` for a lone string or something not iterable, an
    empty list, a service that is not a non-empty str (a `+switch-master` names it
    as text: one given as bytes was never followed), or one listed twice."""
    if isinstance(sentinels, str | bytes) or isinstance(services, str | bytes):
        raise ConfigurationError(f"sentinels and services are lists: {_USAGE}")
    try:
        urls, names = list(sentinels), list(services)
    except TypeError:
        raise ConfigurationError(f"sentinels and services are lists: {_USAGE}") from None
    if not urls or not names:
        raise ConfigurationError(
            "Sentinel needs at least one Sentinel URL and one service (master name)"
        )
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"a service is a Sentinel master name, a non-empty str, not {name!r}: {_USAGE}"
            )
    if len(set(names)) != len(names):
        raise ConfigurationError("a service is listed twice; each shard needs its own")
    return urls, names


def data_template(data_url: str | None, sentinel_url: str, options: ConnectOptions) -> Endpoint:
    """How to reach the data nodes (the Sentinels name their hosts): `data_url`'s
    credentials, database, client name and TLS settings, else the first Sentinel
    URL's. `ConfigurationError` for a `data_url` that names a host or port (which
    would be ignored) or is no Redis URL."""
    if data_url is None:
        return parse_url(sentinel_url, options)
    if not isinstance(data_url, str) or "://" not in data_url:
        raise ConfigurationError(f"data_url is a Redis URL without a host, e.g. {_DATA}")
    try:
        parts = urlsplit(data_url)
        named = parts.hostname is not None or parts.port is not None
    except ValueError:  # an IPv6 bracket left open, a port out of range: a host
        named = True
    if named or parts.scheme == "unix":
        raise ConfigurationError(
            f"data_url {redact(data_url)!r} names a host: it gives only the credentials and "
            f"TLS settings of the data nodes, whose addresses the Sentinels name; write {_DATA}"
        )
    return parse_url(data_url, options)


_DATA = "redis://user:password@ (rediss://user:password@?ssl_ca_certs=... for TLS)"


def is_subscribed(message: Any) -> bool:
    return isinstance(message, list) and len(message) == 3 and message[0] == b"subscribe"


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
