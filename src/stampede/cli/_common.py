"""Helpers shared by the commands: reading keys, showing them, JSON output, and the
connection options of those that talk to Redis (flags or `STAMPEDE_*` variables)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import click

from .._client import Stampede
from .._connect import connect
from ..errors import ConfigurationError, StampedeError
from ..keys import HashPolicy
from ..options import ConnectOptions
from ._errors import usage
from ._output import console
from ._params import FiniteRange, not_empty

__all__ = [
    "SENTINEL_OPTIONS",
    "Where",
    "check_where",
    "connect_from",
    "console",
    "echo_json",
    "from_env",
    "input_keys",
    "keys_from_args",
    "keys_from_file",
    "options",
    "pattern_option",
    "policy_from",
    "sentinel_options",
    "setting",
    "show",
    "unreachable",
    "with_connection",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def show(key: bytes | str) -> str:
    """Render a key for a terminal: undecodable bytes and control characters escaped."""
    text = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else key
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def echo_json(data: Any) -> None:
    """Print `data` as indented JSON."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def keys_from_args(args: Sequence[str]) -> list[bytes]:
    """Keys given on the command line, as the bytes the shell passed (`os.fsencode`)."""
    keys = []
    for position, arg in enumerate(args, 1):
        if not arg:
            raise click.UsageError(
                f"key #{position} is empty; Redis allows an empty key, but it is almost "
                "certainly a quoting mistake here"
            )
        keys.append(os.fsencode(arg))
    return keys


def keys_from_file(stream: IO[bytes]) -> Iterator[bytes]:
    """Keys from a binary stream, one per line (`\\n` or `\\r\\n`); empty lines are errors."""
    name = getattr(stream, "name", "-")
    label = "stdin" if name in ("-", "<stdin>") else click.format_filename(name)
    try:
        for number, line in enumerate(stream, 1):
            key = line[:-1] if line.endswith(b"\n") else line
            if key.endswith(b"\r"):
                key = key[:-1]
            if not key:
                raise click.UsageError(f"{label}, line {number}: empty key; remove blank lines")
            yield key
    except OSError as exc:
        raise click.UsageError(f"cannot read {label}: {exc.strerror or exc}") from None


def input_keys(args: Sequence[str], stream: IO[bytes] | None) -> Iterable[bytes]:
    """The keys of a command: its arguments or `--file`, exactly one of the two."""
    if args and stream is not None:
        raise click.UsageError("give keys as arguments or with --file, not both")
    if stream is not None:
        return keys_from_file(stream)
    if not args:
        raise click.UsageError("no keys: give them as arguments, or --file F ('-' for stdin)")
    return keys_from_args(args)


def policy_from(patterns: Sequence[str]) -> HashPolicy | None:
    """A `HashPolicy` from `--pattern` options, or None; bad patterns are usage errors."""
    if not patterns:
        return None
    try:
        return HashPolicy(*patterns)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="'--pattern'") from None


pattern_option = click.option(
    "--pattern",
    "patterns",
    multiple=True,
    metavar="REGEX",
    help="Hash with a regex policy: the named group 'tag' is hashed (Python "
    "'(?P<tag>...)' or PCRE '(?<tag>...)'), matched at the start of the key. "
    "Repeat for ordered rules; keys no rule matches use the standard hash tag rule.",
)


def _urls(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """`STAMPEDE_URLS` may list URLs separated by commas or whitespace."""
    return tuple(u.strip() for item in value for u in item.split(",") if u.strip())


_DEFAULTS = ConnectOptions()
"""The library's connection defaults: the flags' defaults are taken from here."""


def from_env(name: str) -> dict[str, Any]:
    """click option settings that read the option from `$STAMPEDE_<name>` too."""
    return {"envvar": f"STAMPEDE_{name}", "show_envvar": True}


def _sentinel_pair(*, env: bool) -> list[Callable[[F], F]]:
    """--sentinel and --service; read from STAMPEDE_SENTINELS/SERVICES too when `env`."""
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
    ]


SENTINEL_OPTIONS = _sentinel_pair(env=True)
"""--sentinel and --service: every command that takes --url takes these instead."""


def sentinel_options(fn: F) -> F:
    """--sentinel and --service for a command that needs no server unless told (`slots`,
    `demo`): as for its --url, not from the environment (a worker's shell)."""
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
        callback=not_empty,
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
        where = Where(urls, cluster, connection, partitions, stream, sentinels, services)
        return fn(where, **rest)

    for option in reversed(_CONNECTION):
        command = option(command)
    return command


def check_where(
    urls: Sequence[str], cluster: bool, sentinels: Sequence[str], services: Sequence[str]
) -> None:
    """Usage errors for servers given both ways, or Sentinel given by halves."""
    if sentinels or services:
        if urls or cluster:
            raise click.UsageError("give --sentinel and --service, or --url, not both")
        if not sentinels or not services:
            raise click.UsageError(
                "with Sentinel give both: --sentinel URL (one or more) and --service NAME "
                "(one per shard, in shard order)"
            )


def connect_from(
    urls: Sequence[str],
    cluster: bool,
    connection: ConnectOptions,
    *,
    sentinels: Sequence[str] = (),
    services: Sequence[str] = (),
) -> Stampede:
    """A `Stampede` for the connection options; a usage error if they do not make one
    (a malformed URL, say: nothing is sent yet)."""
    check_where(urls, cluster, sentinels, services)
    try:
        if sentinels:
            return connect(
                sentinels=list(sentinels), services=list(services), connection=connection
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


def setting(
    *decls: str,
    type: Any = None,
    default: Any = None,
    env: str | None = None,
    help: str | None = None,
    show_default: bool = True,
    **more: Any,
) -> Callable[[F], F]:
    """An option whose default `--help` shows, also read from `$STAMPEDE_<env>` when
    `env` is given: one line per option where click needs six."""
    settings: dict[str, Any] = from_env(env) if env is not None else {}
    if not more.get("required"):
        # A required option gets no default at all: newer click no longer enforces
        # `required` when a default (even None) is given.
        settings["default"] = default
    return click.option(
        *decls,
        type=type,
        show_default=show_default,
        help=help,
        **settings,
        **more,
    )


Spec = tuple[Any, ...]
"""An option in a table: (type, default, help) and, optionally, a dict of more click
settings (`env` there names its variable when the table's rule would not)."""


def options(table: Mapping[str | tuple[str, ...], Spec], *, env: bool = False) -> Callable[[F], F]:
    """The options of a table, in its order: name (or names) -> `Spec`. Defaults show
    in `--help`; with `env`, each option is also read from `$STAMPEDE_<NAME>` (its
    name in capitals, `-` as `_`)."""

    def apply(fn: F) -> F:
        for name, (kind, default, text, *rest) in reversed(list(table.items())):
            decls = (name,) if isinstance(name, str) else name
            more = dict(rest[0]) if rest else {}
            var = more.pop("env", decls[0].lstrip("-").replace("-", "_").upper())
            fn = setting(
                *decls, type=kind, default=default, env=var if env else None, help=text, **more
            )(fn)
        return fn

    return apply
