"""Helpers shared by the commands: reading keys, showing them, JSON output, options
from tables. The connection options are in `cli/_connection.py`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, TypeVar

import click

from ..errors import ConfigurationError
from ..keys import HashPolicy
from ._output import console, out
from ._params import from_env

__all__ = [
    "console",
    "echo_json",
    "input_keys",
    "keys_from_args",
    "keys_from_file",
    "options",
    "pattern_option",
    "policy_from",
    "setting",
    "show",
]

F = TypeVar("F", bound=Callable[..., Any])

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def show(key: bytes | str) -> str:
    """Render a key for a terminal: undecodable bytes and control characters escaped."""
    text = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else key
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def echo_json(data: Any) -> None:
    """Print `data` as indented JSON."""
    out(json.dumps(data, indent=2, ensure_ascii=False))


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
