"""What the command line prints when something goes wrong, in one place.

Two kinds of failure, kept apart:

- a *usage* mistake (the command line alone is wrong: a missing option, two that
  exclude each other, a value that does not parse) is click's usage error: exit
  status 2 and "Try 'stampede ... --help'";
- a *runtime* failure (a server that does not answer, or refuses the set-up the
  flags describe; a strategy that fails to start) is one line, `error: ...`, and
  exit status 1 (or the command's documented code, e.g. 3 for unreachable servers).

The library's messages give advice in Python (`cluster=True`,
`ConnectOptions(check_identity=False)`), which is right for library users and
wrong for a shell. `for_cli` rewrites that advice in flags, from the `ADVICE`
table; the library's own messages are left as they are.
"""

from __future__ import annotations

from typing import IO, Any, NoReturn

import click

__all__ = ["ADVICE", "FLAGLESS", "Failure", "fail", "for_cli", "usage", "warn"]

ADVICE: tuple[tuple[str, str], ...] = (
    (
        "give the queue another name (RepairQueue(name=...))",
        "give the queue another name (--stream)",
    ),
    (
        "connect with cluster=True and one node's URL (stampede.connect(url, cluster=True))",
        "pass --cluster with one node's URL",
    ),
    (
        "drop cluster=True and list every independent primary's URL instead",
        "drop --cluster and give every independent primary's URL (--url, repeated) instead",
    ),
    (
        "or use Sentinel (sentinels=..., services=...) to follow failovers",
        "or use --sentinel URL and --service NAME to follow failovers",
    ),
    (
        "raise ConnectOptions.socket_timeout or connect_timeout if it is just slow",
        "raise --socket-timeout or --connect-timeout if it is just slow",
    ),
    (
        "(raise socket_timeout if it is just slow)",
        "(raise --socket-timeout if it is just slow)",
    ),
    (
        "Rename its key, or connect with ConnectOptions(check_identity=False)",
        "Rename its key, or pass --no-check-identity",
    ),
    (
        "accept the new layout: connect with ConnectOptions(check_identity=False) and "
        "call `await st.topology.write_identity()` once",
        "accept the new layout: delete the stampede:shard key on every primary (the next "
        "run writes records for the new list), or pass --no-check-identity to skip the check",
    ),
    (
        "another slot map or hash_pattern than this connect() gives, so keys would be "
        "looked for on the wrong servers; pass the slot_map and hash_pattern the data was "
        "written with.",
        "another slot map or hash pattern than the command line routes by (slots split "
        "evenly over the URLs, the standard hash tag rule), so keys would be looked for "
        "on the wrong servers; the commands take no slot map or hash pattern: run this "
        "from Python with the ones the data was written with.",
    ),
    (
        "Scan in commit mode (or let scan detect the mode); if entity types differ in "
        "mode, scan each with its own match and pattern",
        "Scan with --mode commit (or --mode auto, the default); if entity types differ "
        "in mode, scan each with its own --match and --group-pattern",
    ),
    (
        "give either URLs (or cluster=True) or sentinels= and services=, not both",
        "give --sentinel and --service, or --url, not both",
    ),
    ("data_url is a Redis URL without a host", "--data-url is a Redis URL without a host"),
    (
        "names a host: it gives only the credentials and TLS settings",
        "names a host: --data-url gives only the credentials and TLS settings",
    ),
)
"""The library's advice to Python callers -> the same advice in the CLI's flags.

Each left side is text of a library message (tests/unit/test_cli_errors.py checks
that it still is, so a reworded message cannot slip past untranslated)."""


FLAGLESS: tuple[tuple[str, str, str], ...] = (
    (
        "raise --socket-timeout or --connect-timeout if it is just slow",
        "socket_timeout",
        "if it is just slow, try again later",
    ),
    (
        "raise --socket-timeout if it is just slow",
        "socket_timeout",
        "if it is just slow, try again later",
    ),
    ("Rename its key, or pass --no-check-identity", "check_identity", "Rename its key"),
    (
        "Scan with --mode commit (or --mode auto, the default); if entity types differ "
        "in mode, scan each with its own --match and --group-pattern",
        "group_pattern",
        "Scan in commit mode; if entity types differ in mode, scan each on its own",
    ),
    (", or pass --no-check-identity to skip the check", "check_identity", ""),
    (
        "give the queue another name (--stream)",
        "--stream",  # (a flag: some commands' input-file argument is named `stream`)
        "give the queue another name",
    ),
)
"""Advice in flags -> the parameter (its name, or its flag) a command needs for it,
and what a command without it says instead: advice never names a flag its command
lacks."""


def for_cli(message: object) -> str:
    """`message` (an exception or text) with its Python advice worded in flags, the
    flags of the running command (`click.get_current_context`) only."""
    text = str(message)
    for python, flags in ADVICE:
        text = text.replace(python, flags)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        params = ctx.command.params
        have = {p.name for p in params} | {o for p in params for o in (*p.opts, *p.secondary_opts)}
        for flags, needs, instead in FLAGLESS:
            if needs not in have:
                text = text.replace(flags, instead)
    return text


class Failure(click.ClickException):
    """A runtime failure: `error: <message>` on stderr, exit status `exit_code` (1)."""

    def __init__(self, message: object, *, exit_code: int = 1) -> None:
        super().__init__(for_cli(message))
        self.exit_code = exit_code  # type: ignore[misc]  # click's is a class default

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def fail(message: object, *, exit_code: int = 1) -> NoReturn:
    """Stop the command with a runtime failure (see `Failure`)."""
    raise Failure(message, exit_code=exit_code)


def usage(message: object, *, option: str | None = None) -> click.UsageError:
    """A usage error (exit 2, "Try --help") with the library's advice in flags;
    with `option`, the message names the option whose value is wrong."""
    if option is not None:
        return click.BadParameter(for_cli(message), param_hint=f"'{option}'")
    return click.UsageError(for_cli(message))


def warn(message: str) -> None:
    """A one-line warning on stderr (e.g. a deprecated option or variable)."""
    click.echo(f"warning: {message}", err=True)
