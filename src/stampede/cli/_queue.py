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
from ._common import connect_from, console, unreachable, with_connection

__all__ = ["queue_command"]

EXIT_UNREACHABLE = 3

T = TypeVar("T")


def _run(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    partitions: int | None,
    stream: str,
    body: Callable[[RepairQueue], Awaitable[T]],
) -> T:
    st: Stampede = connect_from(urls, cluster, socket_timeout)

    async def run() -> T:
        async with st:
            queue = RepairQueue(st.topology, name=stream, partitions=partitions)
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
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    partitions: int | None,
    stream: str,
    as_json: bool,
) -> None:
    """Jobs queued, claimed (pending), undelivered (lag), waiting for a retry, dead."""

    async def body(queue: RepairQueue) -> dict[str, Any]:
        stats: dict[str, Any] = dict(await queue.stats(detailed=True))
        stats["streams"] = [s.decode("utf-8", "backslashreplace") for s in queue.streams]
        stats["dead_stream"] = queue.dead.decode("utf-8", "backslashreplace")
        return stats

    stats = _run(urls, cluster, socket_timeout, partitions, stream, body)
    if as_json:
        _dump(stats)
        return
    table = Table(title=f"repair queue {stream} ({len(stats['streams'])} partition(s))")
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


@queue_command.command("dead")
@with_connection
@click.option("--count", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
def dead_command(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    partitions: int | None,
    stream: str,
    count: int,
    as_json: bool,
) -> None:
    """The newest dead letters with their last error."""

    async def body(queue: RepairQueue) -> list[dict[str, str]]:
        return await queue.dead_letters(count)

    dead = _run(urls, cluster, socket_timeout, partitions, stream, body)
    if as_json:
        _dump(dead)
        return
    table = Table(title=f"{len(dead)} dead letter(s), newest first")
    for column in ("id", "group", "attempts", "failed at", "last error"):
        table.add_column(column)
    for entry in dead:
        table.add_row(
            entry["id"],
            entry.get("group", "?"),
            entry.get("attempts", "?"),
            _when(entry.get("failed_at")),
            entry.get("last_error", ""),
        )
    console().print(table)


@queue_command.command("delayed")
@with_connection
@click.option("--count", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
def delayed_command(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    partitions: int | None,
    stream: str,
    count: int,
    as_json: bool,
) -> None:
    """Failed jobs waiting for their retry delay, soonest first."""

    async def body(queue: RepairQueue) -> list[dict[str, Any]]:
        return await queue.delayed(count)

    waiting = _run(urls, cluster, socket_timeout, partitions, stream, body)
    if as_json:
        _dump(waiting)
        return
    table = Table(title=f"{len(waiting)} retry(ies) waiting")
    for column in ("group", "attempts", "due", "delays (s)", "last error"):
        table.add_column(column)
    for item in waiting:
        table.add_row(
            str(item.get("group", "?")),
            str(item.get("attempts", "?")),
            _when(item.get("due_at")),
            str(item.get("delays", "")),
            str(item.get("last_error", "")),
        )
    console().print(table)


@queue_command.command("requeue")
@with_connection
@click.option("--id", "ids", multiple=True, metavar="ID", help="A dead letter's id (repeatable).")
@click.option("--all", "every", is_flag=True, help="Requeue every dead letter (up to --count).")
@click.option("--count", type=click.IntRange(1, 1_000_000), default=10_000, show_default=True)
@json_option
def requeue_command(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    partitions: int | None,
    stream: str,
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

    results = _run(urls, cluster, socket_timeout, partitions, stream, body)
    if as_json:
        _dump(results)
        return
    tally: dict[str, int] = {}
    for item in results:
        tally[item["outcome"]] = tally.get(item["outcome"], 0) + 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(tally.items())) or "nothing"
    console().print(f"{len(results)} dead letter(s): {summary}")
