"""Helpers shared by the commands: reading keys, showing them, JSON output."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import click
from rich.console import Console

from ..errors import ConfigurationError
from ..keys import HashPolicy

__all__ = [
    "console",
    "echo_json",
    "input_keys",
    "keys_from_args",
    "keys_from_file",
    "pattern_option",
    "policy_from",
    "show",
]

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def console() -> Console:
    """A rich console on the current stdout (which click's test runner may swap)."""
    return Console(highlight=False)


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
