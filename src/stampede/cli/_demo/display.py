"""The demo's live view (rich) and its closing summary table."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .engine import Demo
from .stats import Summary

__all__ = ["live_view", "render", "summary_table"]

REFRESH = 0.2


def _column(title: str, rows: list[tuple[str, int]]) -> Table:
    table = Table.grid(padding=(0, 1))
    table.title = title
    table.title_justify = "left"
    table.title_style = "bold"
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    for label, value in rows:
        table.add_row(label, f"{value:,}")
    return table


def _counters(demo: Demo) -> Table:
    c = demo.counters
    strategies = demo.config.strategies
    inline = ("newest-wins", "refetch")
    repairs: list[tuple[str, int]] = [(n, c.repairs.get(n, 0)) for n in inline if n in strategies]
    if "enqueue" in strategies:
        w = demo.worker.stats
        repairs += [("jobs queued", c.queued), ("by the worker", w.repaired + w.rolled_forward)]
    repairs.append(("lost races", c.lost_races))
    grid = Table.grid(padding=(0, 4))
    for _ in range(3):
        grid.add_column(vertical="top")
    writes = {"acknowledged": c.writes, "partial": c.writes_failed, "crashed": c.crashes}
    writes["pauses"] = c.pauses
    reads = {"consistent": c.consistent, "in flight": c.retried, "not found": c.not_found}
    reads |= {"torn": c.torn, "failed": c.read_errors}
    grid.add_row(
        _column("writes", list(writes.items())),
        _column("reads", list(reads.items())),
        _column("repairs", repairs),
    )
    return grid


def render(demo: Demo, progress: Progress) -> RenderableType:
    """One frame: the phase and time, the counters, the latest events."""
    lines = list(demo.counters.events) or ["waiting for the first fault..."]
    events = [Text(line, "dim", no_wrap=True, overflow="ellipsis") for line in lines]
    st = demo.st
    shards = len(st.topology.shard_names)
    kind = "cluster masters" if st.topology.slot_bound else "primaries"
    where = f"{shards} {kind} · {demo.config.mode.value} mode"
    return Panel(
        Group(progress, Text(""), _counters(demo), Text(""), *events),
        title=f"stampede demo: {demo.phase}",
        subtitle=where,
        border_style="cyan",
    )


@contextlib.asynccontextmanager
async def live_view(demo: Demo, console: Console) -> AsyncIterator[None]:
    """Redraw `render(demo)` from the event loop (not rich's thread) until the run ends."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:.0f} s"),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("load", total=max(demo.config.duration, 0.1))
    with Live(render(demo, progress), console=console, auto_refresh=False) as live:

        async def redraw() -> None:
            while True:
                progress.update(task, completed=min(demo.elapsed, demo.config.duration))
                live.update(render(demo, progress), refresh=True)
                await asyncio.sleep(REFRESH)

        drawing = asyncio.create_task(redraw())
        try:
            yield
        finally:
            drawing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drawing
            progress.update(task, completed=min(demo.elapsed, demo.config.duration))
            live.update(render(demo, progress), refresh=True)


def summary_table(summary: Summary) -> Table:
    """The closing table: what was written, injected, read, repaired and left torn.
    Each indented row is a part of the row above it, and the parts add up to it."""
    table = Table(title="stampede demo: summary", show_header=True, header_style="bold")
    table.add_column("what")
    table.add_column("count", justify="right")
    for label, total, parts in summary.sections():
        table.add_row(label, f"{total:,}")
        for part, value in parts:
            table.add_row(f"  {part}", f"{value:,}")
    style = "bold green" if summary.ok else "bold red"
    table.add_row(Text("torn groups left", style), Text(str(summary.torn_left), style))
    if summary.removed is not None:
        table.add_row("keys the demo wrote, removed at the end", f"{summary.removed:,}")
    return table
