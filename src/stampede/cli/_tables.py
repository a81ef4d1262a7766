"""Small helpers the keyspace commands print with."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

__all__ = ["plural", "spans", "table"]


def spans(spans: Sequence[tuple[int, int]]) -> str:
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:3])
    if len(spans) > 3:
        text += f", ... ({len(spans)} ranges)"
    return text


def table(*columns: str, title: str | None = None) -> Table:
    """A table whose long cells fold onto more lines rather than being cut off."""
    table = Table(title=title)
    for column in columns:
        numeric = column in ("Keys", "Share", "Slot", "Shard", "CPU µs", "Net in", "Net out")
        table.add_column(column, overflow="fold", justify="right" if numeric else "left")
    return table


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
