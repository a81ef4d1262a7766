"""`stampede queue stats | dead | delayed | requeue`: look at the repair queue and requeue
dead letters.

Every subcommand takes the connection options (or `STAMPEDE_*` variables) and
`--json`. Exit status 0, 2 on bad usage, 3 when Redis cannot be reached, 1 when
it refuses the set-up (e.g. a cluster node without --cluster).
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import click
from rich.table import Table

from .._client import Stampede
from ..errors import ConfigurationError, ShardResponseError, StampedeError
from ..repair._queue import RepairQueue
from ..repair._queue_requeue import check_entry_id
from ._common import console, setting
from ._connection import Where, unreachable, with_connection
from ._errors import fail
from ._output import out

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
    except (StampedeError, OSError) as exc:  # a server's error reply answered: not exit 3
        down = unreachable(exc) and not isinstance(exc, ShardResponseError)
        fail(exc, exit_code=EXIT_UNREACHABLE if down else 1)


def _when(epoch: Any) -> str:
    try:
        moment = datetime.datetime.fromtimestamp(float(epoch), tz=datetime.UTC)
    except (TypeError, ValueError, OverflowError):
        return str(epoch)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _dump(data: Any) -> None:
    out(json.dumps(data, indent=2, ensure_ascii=False))


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


def _listing_command(
    name: str, doc: str, fetch: Callable[[RepairQueue, int], Awaitable[list[Any]]], title: str
) -> None:
    """Add `stampede queue <name>`: the entries `fetch` gives, as a table or JSON."""

    def command(where: Where, count: int, as_json: bool) -> None:
        entries = _run(where, lambda queue: fetch(queue, count))
        _listing(entries, as_json, title.format(n=len(entries)), _COLUMNS[name])

    command.__doc__ = doc
    count = setting("--count", type=click.IntRange(1, 100_000), default=100)
    queue_command.command(name)(with_connection(count(json_option(command))))


_COLUMNS = {
    "dead": ("id", "group", "attempts", "failed at", "last error"),
    "delayed": ("group", "attempts", "due", "delays (s)", "last error"),
}
"""Each listing's column headings, in order."""
_FIELD = {
    "failed at": "failed_at",
    "due": "due_at",
    "delays (s)": "delays",
    "last error": "last_error",
}
"""The entry field under a heading (where it is not the heading itself)."""
_MISSING = {"group": "?", "attempts": "?", "delays": "", "last_error": ""}


def _shown(entry: dict[str, Any], heading: str) -> str:
    field = _FIELD.get(heading, heading)
    value = entry.get(field, _MISSING.get(field))
    return _when(value) if field in ("failed_at", "due_at") else str(value)


def _listing(
    entries: list[dict[str, Any]], as_json: bool, title: str, columns: Sequence[str]
) -> None:
    """`entries` as JSON, or as a table of `columns`."""
    if as_json:
        _dump(entries)
        return
    table = Table(title=title)
    for heading in columns:
        table.add_column(heading)
    for entry in entries:
        table.add_row(*(_shown(entry, heading) for heading in columns))
    console().print(table)


_listing_command(
    "dead",
    "The newest dead letters with their last error.",
    RepairQueue.dead_letters,
    "{n} dead letter(s), newest first",
)
_listing_command(
    "delayed",
    "Failed jobs waiting for their retry delay, soonest first.",
    RepairQueue.delayed,
    "{n} retry(ies) waiting",
)


@queue_command.command("requeue")
@with_connection
@click.option("--id", "ids", multiple=True, metavar="ID", help="A dead letter's id (repeatable).")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Requeue the oldest dead letters (up to --count of them; malformed ones are skipped).",
)
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
    for eid in ids:
        try:
            check_entry_id(eid)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="'--id'") from None

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
