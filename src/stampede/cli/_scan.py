"""`stampede scan`: audit live data for torn groups, and optionally queue their repairs."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import click
from click.core import ParameterSource
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import StampedeError
from ..repair._queue import RepairQueue
from ..scan import ScanReport, compile_pattern, scan_groups
from ..verdict import Mode
from ._common import console, setting, show
from ._connection import Where, with_connection
from ._errors import fail, usage, warn
from ._logs import log_options, setup_logging
from ._output import out
from ._params import not_empty
from ._regex import can_match_empty

__all__ = ["EXIT_ERROR", "EXIT_TORN", "scan_command"]

EXIT_TORN = 1
"""`stampede scan`: torn groups found."""
EXIT_ERROR = 3
"""`stampede scan`: the scan did not complete (a shard unreachable, timing out or erroring)."""


@click.command("scan")
@with_connection
@click.option(
    "--group-pattern",
    metavar="REGEX",
    help=r"Regex over whole keys with a named group 'group' that names each key's group, "
    r"e.g. '(?P<group>user:\{\d+\}):.*'. Required.",
)
@click.option(
    "--pattern",
    "old_pattern",
    metavar="REGEX",
    hidden=True,
    help="Deprecated name of --group-pattern (elsewhere --pattern is a hash tag regex).",
)
@setting(
    "--mode",
    type=click.Choice(["auto", "stamp", "commit"]),
    default="auto",
    env="MODE",
    help="How groups are judged. auto: commit mode when the groups have commit records, "
    "else stamp. stamp refuses groups that have records.",
)
@setting("--match", default="*", callback=not_empty, help="SCAN MATCH glob to narrow the walk.")
@setting(
    "--count",
    type=click.IntRange(1, 100_000),
    default=1000,
    help="SCAN COUNT hint.",
)
@click.option("--enqueue", is_flag=True, help="Put every torn group on the repair stream.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@log_options("warning")
@click.pass_context
def scan_command(
    ctx: click.Context,
    where: Where,
    mode: str,
    group_pattern: str | None,
    old_pattern: str | None,
    match: str,
    count: int,
    enqueue: bool,
    as_json: bool,
    log_level: str,
    log_format: str,
) -> None:
    """Walk every shard with SCAN and report the groups that stay torn.

    Exit status: 0 none torn, 1 torn groups found, 2 bad usage, 3 the scan did not
    complete (a server unreachable or refusing the set-up, --mode stamp over groups
    with commit records, a shard timing out or erroring), 74 the output could not be
    written, 130 interrupted, 141 the output closed by its reader (| head).
    """
    setup_logging(log_level, log_format)
    pattern = _group_pattern(group_pattern, old_pattern)
    mode = _mode(ctx, mode)
    flag = "--pattern" if old_pattern is not None else "--group-pattern"
    try:
        regex = compile_pattern(pattern)
    except StampedeError as exc:
        raise usage(exc, option=flag) from None
    if can_match_empty(regex, "group"):
        raise usage(
            f"the named group 'group' of {pattern!r} can match an empty string, and a key "
            "whose group is empty names no group: it would be ignored, not judged (with "
            r"'(?P<group>)' every key is, and nothing is ever torn). Make the group match "
            r"at least one character, e.g. '(?P<group>user:\{\d+\}):.*'",
            option=flag,
        )
    st = where.connect()

    async def run() -> tuple[ScanReport, int]:
        async with st:
            queue = None
            if enqueue:  # a queue key of another type is refused now, not after the scan
                queue = RepairQueue(st.topology, name=where.stream, partitions=where.partitions)
                await queue.stats()
            shown = console()
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}"),
                TimeElapsedColumn(),
                console=shown,
                transient=True,
                disable=as_json or not shown.is_terminal,  # no blank line in a file
            ) as bar:
                scanned = bar.add_task("keys scanned", total=None)
                judged = bar.add_task("groups judged", total=None)

                def progress(phase: str, n: int) -> None:
                    bar.advance(scanned if phase == "scan" else judged, n)

                report = await scan_groups(
                    st.topology,
                    regex,
                    match=os.fsencode(match),  # the bytes the shell passed
                    mode=None if mode == "auto" else Mode(mode),
                    count=count,
                    progress=progress,
                )
            queued = 0
            if queue is not None and report.torn:
                for torn in report.torn:
                    job = await queue.enqueue(
                        torn.group,
                        list(torn.keys),
                        torn.seen,
                        torn.reason.value,
                        mode=torn.mode.value,
                    )
                    queued += job is not None
            return report, queued

    try:
        report, queued = asyncio.run(run())
    except (StampedeError, OSError) as exc:
        fail(f"the scan did not complete: {exc}", exit_code=EXIT_ERROR)
    if as_json:
        out(json.dumps(_as_json(report, queued), indent=2))
    else:
        _print(report, queued, enqueue)
    sys.exit(EXIT_TORN if report.torn else 0)


def _group_pattern(group_pattern: str | None, old_pattern: str | None) -> str:
    """--group-pattern, or its deprecated name --pattern (with a warning)."""
    if old_pattern is not None:
        if group_pattern is not None:
            raise click.UsageError("give --group-pattern only (--pattern is its old name)")
        warn(
            "scan's --pattern is deprecated: use --group-pattern (in keyslot, lint and "
            "slots --pattern is a hash tag regex)"
        )
        return old_pattern
    if group_pattern is None:
        raise click.UsageError("Missing option '--group-pattern'.")
    return group_pattern


_OLD_MODE_ENV = "STAMPEDE_SCAN_MODE"


def _mode(ctx: click.Context, mode: str) -> str:
    """--mode, or else the deprecated $STAMPEDE_SCAN_MODE (now $STAMPEDE_MODE, as the
    worker's), with a warning."""
    old = os.environ.get(_OLD_MODE_ENV)
    if old is None or ctx.get_parameter_source("mode") is not ParameterSource.DEFAULT:
        return mode
    warn(f"${_OLD_MODE_ENV} is deprecated: set $STAMPEDE_MODE (the worker reads it too)")
    choices = ("auto", "stamp", "commit")
    if old not in choices:
        raise click.UsageError(f"${_OLD_MODE_ENV}={old!r}: expected one of {', '.join(choices)}")
    return old


def _as_json(report: ScanReport, queued: int) -> dict[str, Any]:
    return {
        "mode": report.mode.value,
        "keys_scanned": report.keys_scanned,
        "groups": report.groups,
        "committed": report.committed,
        "consistent": report.consistent,
        "not_found": report.not_found,
        "torn_count": len(report.torn),
        "ignored_keys": report.ignored_keys,
        "misrouted_count": len(report.misrouted),
        "misrouted": [show(k) for k in report.misrouted[:1000]],
        "seconds": round(report.seconds, 3),
        "enqueued": queued,
        "torn": [
            {"group": show(t.group), "reason": t.reason.value, "mode": t.mode.value, "seen": t.seen}
            for t in report.torn
        ],
    }


def _print(report: ScanReport, queued: int, enqueue: bool) -> None:
    out = console()
    if report.torn:
        table = Table(title=f"{len(report.torn)} torn group(s)")
        table.add_column("group")
        table.add_column("reason")
        table.add_column("seen (key = version:token)")
        for torn in report.torn[:1000]:
            seen = ", ".join(f"{k}={v}" for k, v in torn.seen.items())
            table.add_row(show(torn.group), torn.reason.value, seen)
        out.print(table)
    rate = report.keys_scanned / report.seconds if report.seconds else 0.0
    out.print(
        f"{report.keys_scanned} keys in {report.groups} groups scanned in "
        f"{report.seconds:.2f}s ({rate:,.0f} keys/s), judged in {report.mode.value} mode "
        f"({report.committed} with commit records): {report.consistent} consistent, "
        f"{report.not_found} not found, {len(report.torn)} torn, "
        f"{report.ignored_keys} keys outside the pattern, "
        f"{len(report.misrouted)} on a server they do not route to"
    )
    if report.misrouted:
        shown = ", ".join(show(k) for k in report.misrouted[:5])
        out.print(
            f"misrouted keys (written under another URL order or slot map?): {shown}"
            + (" ..." if len(report.misrouted) > 5 else "")
        )
    if enqueue:
        out.print(f"{queued} repair job(s) enqueued ({len(report.torn) - queued} already pending)")
