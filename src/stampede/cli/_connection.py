"""The connection options of the commands that talk to Redis (flags or `STAMPEDE_*`
variables): --url and --cluster, or --sentinel, --service and --data-url; the
timeouts, the identity check and the repair stream; and a `Stampede` from them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from .._client import Stampede
from .._connect import connect
from ..errors import ConfigurationError, StampedeError
from ..options import ConnectOptions
from ..topology._sentinel_ask import data_template
from ._errors import usage
from ._params import FiniteRange, from_env, utf8_name

__all__ = [
    "SENTINEL_OPTIONS",
    "Where",
    "check_where",
    "connect_from",
    "sentinel_options",
    "unreachable",
    "with_connection",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _urls(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """`STAMPEDE_URLS` may list URLs separated by commas or whitespace."""
    return tuple(u.strip() for item in value for u in item.split(",") if u.strip())


_DEFAULTS = ConnectOptions()
"""The library's connection defaults: the flags' defaults are taken from here."""


def _data_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--data-url is a URL without a host (the Sentinels name the hosts): checked now."""
    if value is not None:
        try:
            data_template(value, "redis://sentinel", _DEFAULTS)
        except ConfigurationError as exc:
            raise usage(exc, option="--data-url") from None
    return value


def _sentinel_pair(*, env: bool) -> list[Callable[[F], F]]:
    """--sentinel, --service and --data-url; read from STAMPEDE_SENTINELS, _SERVICES and
    _DATA_URL too when `env`."""
    return [
        click.option(
            "--sentinel",
            "sentinels",
            multiple=True,
            metavar="URL",
            callback=_urls,
            help="A Redis Sentinel's URL (repeatable), instead of --url: the primaries are "
            "the --service masters it knows, followed through failovers.",
            **(from_env("SENTINELS") if env else {}),
        ),
        click.option(
            "--service",
            "services",
            multiple=True,
            metavar="NAME",
            callback=_urls,
            help="A Sentinel master name per shard, in shard order (repeatable; --sentinel).",
            **(from_env("SERVICES") if env else {}),
        ),
        click.option(
            "--data-url",
            metavar="URL",
            callback=_data_url,
            help="With --sentinel: the data nodes' credentials and TLS settings, as a URL "
            "without a host (redis://user:password@, rediss://...@ for TLS) when they are not "
            "the first --sentinel URL's. Keep a password out of the process list: set "
            "the variable instead.",
            **(from_env("DATA_URL") if env else {}),
        ),
    ]


SENTINEL_OPTIONS = _sentinel_pair(env=True)
"""--sentinel, --service and --data-url: every command that takes --url takes these
instead."""


def sentinel_options(fn: F) -> F:
    """--sentinel, --service and --data-url for a command that needs no server unless told
    (`slots`, `demo`): as for its --url, not from the environment (a worker's shell)."""
    for option in reversed(_sentinel_pair(env=False)):
        fn = option(fn)
    return fn


_CONNECTION = [
    click.option(
        "--url",
        "urls",
        multiple=True,
        metavar="URL",
        callback=_urls,
        envvar="STAMPEDE_URLS",
        show_envvar=True,
        help="A Redis URL: one per primary (in the application's order), or with --cluster "
        "one or more startup nodes. The variable takes several, comma-separated.",
    ),
    click.option(
        "--cluster",
        is_flag=True,
        envvar="STAMPEDE_CLUSTER",
        show_envvar=True,
        help="The URL is a Redis Cluster node.",
    ),
    *SENTINEL_OPTIONS,
    click.option(
        "--socket-timeout",
        type=FiniteRange(min=0.01),
        default=_DEFAULTS.socket_timeout,
        show_default=True,
        envvar="STAMPEDE_SOCKET_TIMEOUT",
        show_envvar=True,
        help="Seconds before a silent shard counts as down (ConnectOptions.socket_timeout).",
    ),
    click.option(
        "--connect-timeout",
        type=FiniteRange(min=0.01),
        default=_DEFAULTS.connect_timeout,
        show_default=True,
        envvar="STAMPEDE_CONNECT_TIMEOUT",
        show_envvar=True,
        help="Seconds to connect to a server (ConnectOptions.connect_timeout).",
    ),
    click.option(
        "--check-identity/--no-check-identity",
        default=_DEFAULTS.check_identity,
        show_default=True,
        envvar="STAMPEDE_CHECK_IDENTITY",
        show_envvar=True,
        help="Check each primary's shard identity record (URLs in another order or number "
        "than the data was written with are refused); turn off only to re-shard.",
    ),
    click.option(
        "--partitions",
        type=click.IntRange(1, 1024),
        default=None,
        envvar="STAMPEDE_PARTITIONS",
        show_envvar=True,
        help="Repair stream partitions [default: 1, or 8 on a cluster].",
    ),
    click.option(
        "--stream",
        default="stampede:repairs",
        callback=utf8_name,
        show_default=True,
        envvar="STAMPEDE_STREAM",
        show_envvar=True,
        help="Name of the repair stream (its partitions, markers and dead letters derive from it).",
    ),
]


@dataclass(frozen=True)
class Where:
    """The connection options of a command: the servers, and the repair stream."""

    urls: tuple[str, ...]
    cluster: bool
    connection: ConnectOptions
    partitions: int | None
    stream: str
    sentinels: tuple[str, ...] = ()
    services: tuple[str, ...] = ()
    data_url: str | None = None

    @property
    def socket_timeout(self) -> float:
        return self.connection.socket_timeout

    def connect(self) -> Stampede:
        """A `Stampede` for these servers; a usage error if the options make none."""
        return connect_from(
            self.urls,
            self.cluster,
            self.connection,
            sentinels=self.sentinels,
            services=self.services,
            data_url=self.data_url,
        )


def with_connection(fn: Callable[..., T]) -> Callable[..., T]:
    """Add the connection options (`_CONNECTION`, --url to --stream) to a command,
    which gets them as one `Where` (its first argument)."""

    @functools.wraps(fn)
    def command(
        urls: tuple[str, ...],
        cluster: bool,
        sentinels: tuple[str, ...],
        services: tuple[str, ...],
        data_url: str | None,
        socket_timeout: float,
        connect_timeout: float,
        check_identity: bool,
        partitions: int | None,
        stream: str,
        **rest: Any,
    ) -> T:
        connection = ConnectOptions(
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            check_identity=check_identity,
        )
        where = Where(urls, cluster, connection, partitions, stream, sentinels, services, data_url)
        return fn(where, **rest)

    for option in reversed(_CONNECTION):
        command = option(command)
    return command


def check_where(
    urls: Sequence[str],
    cluster: bool,
    sentinels: Sequence[str],
    services: Sequence[str],
    data_url: str | None = None,
) -> None:
    """Usage errors for servers given both ways, Sentinel given by halves, or
    --data-url without Sentinel."""
    if data_url is not None and not sentinels:
        raise click.UsageError(
            "--data-url gives the credentials of data nodes that Sentinel manages: use it "
            "with --sentinel and --service (with --url, put the credentials in each URL)"
        )
    if sentinels or services:
        if urls or cluster:
            raise click.UsageError(
                "give --sentinel and --service, or --url, not both" + _from_env("urls", "URLS")
            )
        if not sentinels or not services:
            raise click.UsageError(
                "with Sentinel give both: --sentinel URL (one or more) and --service NAME "
                "(one per shard, in shard order)"
            )


def _from_env(name: str, var: str) -> str:
    """Where a value came from the environment, not the command line: say so."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.get_parameter_source(name) is not ParameterSource.ENVIRONMENT:
        return ""
    return f" (--url is set by $STAMPEDE_{var}: unset it to use --sentinel)"


def connect_from(
    urls: Sequence[str],
    cluster: bool,
    connection: ConnectOptions,
    *,
    sentinels: Sequence[str] = (),
    services: Sequence[str] = (),
    data_url: str | None = None,
) -> Stampede:
    """A `Stampede` for the connection options; a usage error if they do not make one
    (a malformed URL, say: nothing is sent yet)."""
    check_where(urls, cluster, sentinels, services, data_url)
    try:
        if sentinels:
            return connect(
                sentinels=list(sentinels),
                services=list(services),
                data_url=data_url,
                connection=connection,
            )
        if not urls:
            raise click.UsageError(
                "give at least one --url (several for independent primaries), or set "
                "STAMPEDE_URLS (or --sentinel and --service)"
            )
        return connect(list(urls), cluster=cluster, connection=connection)
    except StampedeError as exc:
        raise usage(exc) from None


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says a server could not be reached (as opposed to misconfigured):
    `open()`'s `SetupError` with problem `unreachable`/`timeout`, or a shard error."""
    from ..errors import ShardError

    if getattr(exc, "problem", None) in ("unreachable", "timeout"):
        return True
    return isinstance(exc, ShardError | OSError)
