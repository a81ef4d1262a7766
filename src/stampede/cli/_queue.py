"""`stampede queue stats | dead | delayed | requeue`: look at the repair queue and requeue
dead letters.

Every subcommand takes the connection options (or `STAMPEDE_*` variables) and
`--json`. Exit status 0, 2 on bad usage, 3 when Redis cannot be reached.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.table import Table

from .._client import Stampede
from ..errors import ConfigurationError, StampedeError
from ..repair._queue import RepairQueue
from ._common import Where, console, setting, unreachable, with_connection

__all__ = ["queue_command"]

EXIT_UNREACHABLE = 3

T = TypeVar("T")


def _run(where: Where, body: Callable[[RepairQueue], Awaitable[T]]) -> T:
    st: Stampede = where.connect()

    async def run() -> T:
        async with st:
            queue = RepairQueue(st.topology, name=where.stream, partitions=where.partitions)
            return await body(queue)

    try:
        return asyncio.run(run())
    except (StampedeError, OSError) as exc:
        if isinstance(exc, ConfigurationError) and not unreachable(exc):
            raise click.UsageError(str(exc)) from None
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_UNREACHABLE)


def _when(epoch: Any) -> str:
    try:
        moment = datetime.datetime.fromtimestamp(float(epoch), tz=datetime.UTC)
    except (TypeError, ValueError, OverflowError):
        return str(epoch)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("queue")
def queue_command() -> None:
    """Inspect the repair queue: counts, dead letters, waiting retries; requeue dead letters."""


@queue_command.command("stats")
@with_connection
@json_option
def stats_command(
    where: Where,
    as_json: bool,
) -> None:
    """Jobs queued, claimed (pending), undelivered (lag), waiting for a retry, dead."""

    async def body(queue: RepairQueue) -> dict[str, Any]:
        stats: dict[str, Any] = dict(await queue.stats(detailed=True))
        stats["streams"] = [s.decode("utf-8", "backslashreplace") for s in queue.streams]
        stats["dead_stream"] = queue.dead.decode("utf-8", "backslashreplace")
        return stats

    stats = _run(where, body)
    if as_json:
        _dump(stats)
        return
    table = Table(title=f"repair queue {where.stream} ({len(stats['streams'])} partition(s))")
    table.add_column("count")
    table.add_column("value", justify="right")
    meaning = {
        "length": "queued (stream entries + delayed retries)",
        "pending": "claimed by a worker, not yet acked",
        "lag": "not yet delivered to any worker",
        "delayed": "retries waiting for their backoff delay",
        "dead": "dead letters",
    }
    for name, text in meaning.items():
        table.add_row(f"{name}: {text}", str(stats.get(name, 0)))
    console().print(table)


count_option = setting("--count", type=click.IntRange(1, 100_000), default=100)


@queue_command.command("dead")
@with_connection
@count_option
@json_option
def dead_command(where: Where, count: int, as_json: bool) -> None:
    """The newest dead letters with their last error."""
    dead = _run(where, lambda queue: queue.dead_letters(count))
    _listing(dead, as_json, f"{len(dead)} dead letter(s), newest first", _DEAD_COLUMNS)


@queue_command.command("delayed")
@with_connection
@count_option
@json_option
def delayed_command(where: Where, count: int, as_json: bool) -> None:
    """Failed jobs waiting for their retry delay, soonest first."""
    waiting = _run(where, lambda queue: queue.delayed(count))
    _listing(waiting, as_json, f"{len(waiting)} retry(ies) waiting", _DELAYED_COLUMNS)


Column = tuple[str, str, Callable[[Any], str]]
"""A listing's column: its title, the entry's field, how the value is shown."""

_DEAD_COLUMNS: list[Column] = [
    ("id", "id", str),
    ("group", "group", str),
    ("attempts", "attempts", str),
    ("failed at", "failed_at", _when),
    ("last error", "last_error", str),
]
_DELAYED_COLUMNS: list[Column] = [
    ("group", "group", str),
    ("attempts", "attempts", str),
    ("due", "due_at", _when),
    ("delays (s)", "delays", str),
    ("last error", "last_error", str),
]
_MISSING = {"group": "?", "attempts": "?", "delays": "", "last_error": ""}


def _listing(
    entries: list[dict[str, Any]], as_json: bool, title: str, columns: list[Column]
) -> None:
    """`entries` as JSON, or as a table of `columns`."""
    if as_json:
        _dump(entries)
        return
    table = Table(title=title)
    for heading, _, _ in columns:
        table.add_column(heading)
    for entry in entries:
        table.add_row(*(show(entry.get(field, _MISSING.get(field))) for _, field, show in columns))
    console().print(table)


@queue_command.command("requeue")
@with_connection
@click.option("--id", "ids", multiple=True, metavar="ID", help="A dead letter's id (repeatable).")
@click.option("--all", "every", is_flag=True, help="Requeue every dead letter (up to --count).")
@setting("--count", type=click.IntRange(1, 1_000_000), default=10_000)
@json_option
def requeue_command(
    where: Where,
    ids: tuple[str, ...],
    every: bool,
    count: int,
    as_json: bool,
) -> None:
    """Put dead letters back on the queue as new jobs, then delete them.

    A group that already has a job is covered by it (outcome `pending`); a malformed
    dead letter has nothing to repair and is kept (`malformed`).
    """
    if bool(ids) == every:
        raise click.UsageError("give --id ID (one or more) or --all")

    async def body(queue: RepairQueue) -> list[dict[str, str]]:
        return await queue.requeue_dead(list(ids) if ids else None, count=count)

    results = _run(where, body)
    if as_json:
        _dump(results)
        return
    tally: dict[str, int] = {}
    for item in results:
        tally[item["outcome"]] = tally.get(item["outcome"], 0) + 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(tally.items())) or "nothing"
    console().print(f"{len(results)} dead letter(s): {summary}")
