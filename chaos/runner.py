"""Run the scenarios on both topologies and the fuzzers; print the tables (rich).

The exit status is 0 only when every run has no violation and every group read
consistent at the end, and fuzzing met no exception but the documented ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stampede.testing import LocalCluster, LocalPrimaries

from .checker import CheckReport
from .report import Violation
from .scenarios import SCENARIOS, Env, Scenario, ScenarioRun, Timing, run_scenario

__all__ = [
    "FAULT_KINDS",
    "Outcome",
    "fuzz_table",
    "print_problems",
    "run_all",
    "scenario_table",
    "totals_table",
]

FAULT_KINDS = (
    "crash",
    "hold",
    "late-send",
    "kill",
    "pause",
    "migrate",
    "worker-kill",
    "skew",
    "poison",
)
"""The fault events counted as "faults injected" (restarts, resumes and such are not)."""


@dataclass
class Outcome:
    """Everything a chaos run found."""

    runs: list[ScenarioRun] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # scenario, topology, error
    fuzz_failures: list[str] = field(default_factory=list)
    defects_present: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        clean = all(r.report.ok and not r.torn_at_end for r in self.runs)
        return clean and not self.errors and not self.fuzz_failures and not self.defects_present


def _faults(report: CheckReport | collections.Counter[str]) -> str:
    """Faults injected, by kind: `1 kill`, `3 migrate + 518 crash`."""
    tally = report.counts if isinstance(report, CheckReport) else report
    counts = [(tally[f"faults_{kind}"], kind) for kind in FAULT_KINDS]
    return " + ".join(f"{n} {kind}" for n, kind in counts if n) or "0"


def _repairs(report: CheckReport) -> str:
    c = report.counts
    done = c["repairs_rewritten"] + c["repairs_rolled_forward"]
    parts = [str(done)]
    extra = {
        "lost race": c["repairs_lost_race"],
        "queued": c["repairs_queued"],
        "failed": c["repairs_fail"],
    }
    parts += [f"{n} {name}" for name, n in extra.items() if n]
    return " / ".join(parts)


def scenario_table(scenario: Scenario, runs: Sequence[ScenarioRun]) -> Table:
    """One scenario's figures: a row per topology."""
    table = Table(title=f"{scenario.name}: {scenario.title}", title_justify="left")
    for column in ("topology", "writes ok/unknown/fail", "reads", "faults", "torn reads"):
        table.add_column(column, justify="right" if column != "topology" else "left")
    for column in ("repairs", "violations", "lost writes", "seconds"):
        table.add_column(column, justify="right")
    for run in runs:
        c = run.report.counts
        writes = f"{c['writes_ok']}/{c['writes_unknown']}/{c['writes_fail']}"
        reads = c["reads_ok"] + c["reads_fail"]
        violations = len(run.report.violations) + len(run.torn_at_end)
        table.add_row(
            run.topology,
            writes,
            str(reads),
            _faults(run.report),
            str(c["torn_reads_detected"]),
            _repairs(run.report),
            f"[bold red]{violations}[/]" if violations else "0",
            str(len(run.report.lost_to_fault)),
            f"{run.seconds:.1f}",
        )
    return table


def print_problems(
    console: Console,
    label: str,
    notes: Sequence[str],
    violations: Sequence[Violation],
    torn: Sequence[str],
) -> None:
    """A run's notes (marked with `label`), its first 20 violations and the groups
    left torn at its end."""
    for note in notes:
        console.print(f"  [dim]{label}:[/] {note}")
    for violation in violations[:20]:
        console.print(f"  [bold red]{violation.kind}[/] {violation.message}")
    if len(violations) > 20:
        console.print(f"  ... and {len(violations) - 20} more violations")
    for group in torn:
        console.print(f"  [bold red]torn at the end[/] {group}")


def _details(console: Console, run: ScenarioRun) -> None:
    print_problems(console, run.topology, run.notes, run.report.violations, run.torn_at_end)
    if run.report.lost_to_fault:
        console.print(
            f"  {run.topology}: {len(run.report.lost_to_fault)} acknowledged write(s) lost to "
            "the data-loss fault:"
        )
        for lost in run.report.lost_to_fault:
            console.print(
                f"    write {lost.write} of {lost.group} (stamp {lost.stamp[0]}:{lost.stamp[1]}, "
                f"acknowledged at t={lost.acknowledged_at:.3f}) held "
                f"{', '.join(lost.keys_on_shard)} on {lost.shard}"
            )
    if run.history_path is not None:
        console.print(f"  [dim]history: {run.history_path}[/]")


@contextlib.contextmanager
def _servers(kind: str) -> Iterator[Env]:
    if kind == "cluster":
        with LocalCluster(3, 0) as cluster:
            yield Env("cluster", cluster)
    else:
        with LocalPrimaries(3) as primaries:
            yield Env("shards", primaries)


async def run_all(
    console: Console,
    *,
    topologies: Sequence[str],
    scenarios: Sequence[Scenario] = SCENARIOS,
    timing: Timing,
    workdir: Path,
    runs: int = 1,
) -> Outcome:
    """Every scenario on every topology it applies to, `runs` times; a table per scenario
    (with several runs, one row of totals per topology and the runs with violations)."""
    outcome = Outcome()
    by_scenario: dict[str, list[ScenarioRun]] = collections.defaultdict(list)
    for kind in topologies:
        with _servers(kind) as env:
            for scenario in scenarios:
                if kind not in scenario.topologies:
                    continue
                for i in range(runs):
                    console.print(f"[dim]running {scenario.name} on {kind} ({i + 1}/{runs})...[/]")
                    suffix = "" if runs == 1 else f"-{i + 1}"
                    try:
                        run = await run_scenario(
                            scenario, env, timing, workdir=workdir, suffix=suffix
                        )
                    except Exception as exc:
                        error = "".join(traceback.format_exception(exc))
                        outcome.errors.append((scenario.name, kind, error))
                        console.print(f"[bold red]{scenario.name} on {kind} failed:[/]\n{error}")
                        continue
                    outcome.runs.append(run)
                    by_scenario[scenario.name].append(run)
    for scenario in scenarios:
        done = by_scenario.get(scenario.name, [])
        if not done:
            continue
        console.print()
        if runs == 1:
            console.print(scenario_table(scenario, done))
            for run in done:
                _details(console, run)
            continue
        console.print(totals_table(scenario, done))
        for run in done:
            if not run.report.ok or run.torn_at_end:
                _details(console, run)
    return outcome


def totals_table(scenario: Scenario, runs: Sequence[ScenarioRun]) -> Table:
    """One row per topology: the totals over its runs."""
    title = f"{scenario.name}: {scenario.title} (totals)"
    table = Table(title=title, title_justify="left")
    columns: tuple[str, ...] = (
        "topology",
        "runs",
        "writes ok/unknown/fail",
        "deletes ok",
        "deposits ok/unknown",
    )
    columns += ("reads", "faults", "repairs", "violations", "lost writes", "seconds")
    for column in columns:
        table.add_column(column, justify="left" if column == "topology" else "right")
    for kind in dict.fromkeys(r.topology for r in runs):
        mine = [r for r in runs if r.topology == kind]
        c: collections.Counter[str] = collections.Counter()
        for run in mine:
            c.update(run.report.counts)
        violations = sum(len(r.report.violations) + len(r.torn_at_end) for r in mine)
        table.add_row(
            kind,
            str(len(mine)),
            f"{c['writes_ok']}/{c['writes_unknown']}/{c['writes_fail']}",
            str(c["deletes_ok"]),
            f"{c['deposits_ok']}/{c['deposits_unknown']}",
            str(c["reads_ok"] + c["reads_fail"]),
            _faults(c),
            str(c["repairs_rewritten"] + c["repairs_rolled_forward"] + c["repairs_deleted"]),
            f"[bold red]{violations}[/]" if violations else "0",
            str(sum(len(r.report.lost_to_fault) for r in mine)),
            f"{sum(r.seconds for r in mine):.0f}",
        )
    return table


def fuzz_table(console: Console, cases: int, outcome: Outcome) -> None:
    """Run each fuzz target `cases` times and replay the defects found before; print both."""
    from .fuzz import REGRESSIONS, TARGETS, probe, run_target

    table = Table(title=f"fuzz: {cases} cases per target (hypothesis)", title_justify="left")
    for column in ("target", "cases", "unexpected exceptions", "seconds"):
        table.add_column(column, justify="left" if column == "target" else "right")
    for target in TARGETS:
        started = time.monotonic()
        result = run_target(target, cases)
        if result.failure is not None:
            outcome.fuzz_failures.append(f"{target}: {result.failure}")
        table.add_row(
            target,
            str(result.cases),
            "[bold red]yes[/]" if result.failure else "0",
            f"{time.monotonic() - started:.1f}",
        )
    console.print()
    console.print(table)
    for failure in outcome.fuzz_failures:
        console.print(f"  [bold red]unexpected[/] {failure}")
    again = Table(title="defects fuzzing found (fixed), replayed", title_justify="left")
    for column in ("defect", "target", "status"):
        again.add_column(column)
    for defect in REGRESSIONS:
        raised = probe(defect)
        if raised is not None:
            outcome.defects_present.append(defect.name)
        status = "fixed" if raised is None else f"[bold red]REGRESSED[/] ({raised})"
        again.add_row(defect.name, defect.target, status)
    console.print(again)


def run(
    console: Console,
    *,
    topologies: Sequence[str],
    scenarios: Sequence[Scenario],
    timing: Timing,
    workdir: Path,
    fuzz_cases: int,
    runs: int = 1,
) -> Outcome:
    """The whole chaos run: scenarios (asyncio), then fuzzing."""
    outcome = asyncio.run(
        run_all(
            console,
            topologies=topologies,
            scenarios=scenarios,
            timing=timing,
            workdir=workdir,
            runs=runs,
        )
    )
    if fuzz_cases:
        fuzz_table(console, fuzz_cases, outcome)
    return outcome
