"""Run the failover scenarios and print their table (rich), as `runner` does for the others.

One table for all the failover scenarios, a row per scenario (its totals over
`runs`): operations and their outcomes, violations, acknowledged writes lost to the
fault (not durable, so allowed), and the recovery figures, median / max over the runs,
in seconds after the fault: the replica promoted, the first acknowledged group write
on the failed-over shard, the last error. The errors after the fault, by operation
and type, follow the table; then the details of every run with a violation.
"""

from __future__ import annotations

import collections
import statistics
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .failover_scenarios import FailoverRun, FailoverScenario, FailoverTiming, run_failover
from .runner import print_problems

__all__ = ["FailoverOutcome", "failover_table", "run_failovers"]


@dataclass
class FailoverOutcome:
    """The failover runs, and the runs that crashed (scenario, error)."""

    runs: list[FailoverRun] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        clean = all(r.report.ok and not r.torn_at_end for r in self.runs)
        return clean and not self.errors


def _spread(values: Sequence[float | None]) -> str:
    """`median / max` of the values that are known; `-` for none."""
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    return f"{statistics.median(known):.2f} / {max(known):.2f}"


def failover_table(runs: Sequence[FailoverRun]) -> Table:
    """A row per scenario: totals over its runs and the recovery figures."""
    table = Table(title="failover scenarios (totals; seconds: median / max)", title_justify="left")
    columns = (
        "scenario",
        "runs",
        "writes ok/unknown/fail",
        "durable / short",
        "txns ok/unknown/fail",
        "reads (atomic)",
        "violations",
        "lost writes",
        "promoted s",
        "first write s",
        "last error s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name in dict.fromkeys(r.scenario for r in runs):
        mine = [r for r in runs if r.scenario == name]
        c: collections.Counter[str] = collections.Counter()
        for run in mine:
            c.update(run.report.counts)
        figures = [f for run in mine for f in run.report.figures]
        violations = sum(len(r.report.violations) + len(r.torn_at_end) for r in mine)
        table.add_row(
            name,
            str(len(mine)),
            f"{c['writes_ok']}/{c['writes_unknown']}/{c['writes_fail']}",
            f"{c['durable_yes']} / {c['durable_short']}",
            f"{c['txn_ok']}/{c['txn_unknown'] + c['txn_pending']}/{c['txn_fail']}",
            f"{c['reads_ok'] + c['reads_fail']} ({c['rread_ok'] + c['rread_fail']})",
            f"[bold red]{violations}[/]" if violations else "0",
            str(sum(len(r.report.lost_to_fault) for r in mine)),
            _spread([f.promoted for f in figures]),
            _spread([f.first_write for f in figures]),
            _spread([f.last_error for f in figures]),
        )
    return table


def _errors(console: Console, runs: Sequence[FailoverRun]) -> None:
    for name in dict.fromkeys(r.scenario for r in runs):
        tally: collections.Counter[str] = collections.Counter()
        for run in runs:
            if run.scenario == name:
                for figures in run.report.figures:
                    tally.update(figures.errors)
        listed = ", ".join(f"{n} {kind}" for kind, n in tally.most_common()) or "none"
        console.print(f"  [dim]{name}: errors after the fault:[/] {listed}")


def _details(console: Console, run: FailoverRun) -> None:
    print_problems(console, run.scenario, run.notes, run.report.violations, run.torn_at_end)
    console.print(f"  [dim]history: {run.history_path}[/]")


async def run_failovers(
    console: Console,
    scenarios: Sequence[FailoverScenario],
    *,
    timing: FailoverTiming,
    workdir: Path,
    runs: int = 1,
) -> FailoverOutcome:
    """Each scenario `runs` times (one set of servers per scenario); print the table."""
    outcome = FailoverOutcome()
    for scenario in scenarios:
        with scenario.servers() as servers:
            for i in range(runs):
                console.print(f"[dim]running {scenario.name} ({i + 1}/{runs})...[/]")
                suffix = "" if runs == 1 else f"-{i + 1}"
                try:
                    run = await run_failover(
                        scenario, servers, timing, workdir=workdir, suffix=suffix
                    )
                except Exception as exc:
                    error = "".join(traceback.format_exception(exc))
                    outcome.errors.append((scenario.name, error))
                    console.print(f"[bold red]{scenario.name} failed:[/]\n{error}")
                    continue
                outcome.runs.append(run)
    if not outcome.runs:
        return outcome
    console.print()
    console.print(failover_table(outcome.runs))
    _errors(console, outcome.runs)
    for run in outcome.runs:
        if runs == 1 or not run.report.ok or run.torn_at_end:
            _details(console, run)
    return outcome
