"""The figures of the read-atomic edge scenarios (`ramp_edges`) that the runner's generic
tables have no column for: deletes, group reads, read errors by type, faults by kind,
violations by kind and by probable cause (`ramp_edge_causes.FINDINGS`)."""

from __future__ import annotations

import collections
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .ramp_edge_causes import FINDINGS, FIXED
from .scenarios import RAMP_EDGE_SCENARIOS, ScenarioRun

__all__ = ["edge_totals", "print_edge_figures"]

_FAULTS = ("crash", "hold", "worker-kill", "lost-commit", "sweep")
Totals = dict[tuple[str, str], tuple[int, float, collections.Counter[str]]]


def _by(c: collections.Counter[str], prefix: str) -> str:
    items = sorted((k[len(prefix) :], n) for k, n in c.items() if k.startswith(prefix) and n)
    return ", ".join(f"{name} {n}" for name, n in items) or "none"


def edge_totals(runs: Sequence[ScenarioRun]) -> Totals:
    """(scenario, topology) -> (runs, seconds, summed counts), edge scenarios only."""
    names = [s.name for s in RAMP_EDGE_SCENARIOS]
    out: dict[tuple[str, str], tuple[int, float, collections.Counter[str]]] = {}
    for run in sorted(
        (r for r in runs if r.scenario in names), key=lambda r: names.index(r.scenario)
    ):
        n, seconds, c = out.get((run.scenario, run.topology), (0, 0.0, collections.Counter()))
        c.update(run.report.counts)
        out[run.scenario, run.topology] = (n + 1, seconds + run.seconds, c)
    return out


def print_edge_figures(console: Console, runs: Sequence[ScenarioRun]) -> None:
    """One row per edge scenario and topology (totals over its runs), its details below,
    and what each probable cause met means."""
    totals = edge_totals(runs)
    if not totals:
        return
    table = Table(title="read-atomic edge scenarios (totals)", title_justify="left")
    for column in ("scenario", "topology", "runs", "txns ok/unknown/aborted", "st.delete",
                   "read_atomic ok/failed", "group reads ok/repaired", "violations",
                   "seconds"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("scenario", "topology") else "right")
    details: list[str] = []
    causes: set[str] = set()
    for (scenario, topology), (n, seconds, c) in totals.items():
        violations = sum(v for k, v in c.items() if k.startswith("violations_"))
        table.add_row(
            scenario,
            topology,
            str(n),
            f"{c['writes_ok']}/{c['writes_unknown']}/{c['writes_fail']}",
            str(c["deletes_ok"]),
            f"{c['reads_ok']}/{c['reads_fail']}",
            f"{c['greads_ok']}/{c['greads_repaired']}" if c["greads_ok"] else "-",
            f"[bold red]{violations}[/]" if violations else "0",
            f"{seconds:.0f}",
        )
        faults = [f"{kind} {c[f'faults_{kind}']}" for kind in _FAULTS if c[f"faults_{kind}"]]
        if c["evicted_keys"]:
            faults.append(f"evicted keys {c['evicted_keys']}")
        details.append(
            f"  {scenario} {topology}: faults {', '.join(faults) or 'none'}; txns not "
            f"acknowledged {_by(c, 'txn_errors_')}; read errors {_by(c, 'errors_')}; "
            f"late re-creations spared {c['late_recreated']}; violations "
            f"{_by(c, 'violations_')}; probable causes {_by(c, 'causes_')}"
        )
        causes |= {k[len("causes_") :] for k, v in c.items() if k.startswith("causes_") and v}
    console.print()
    console.print(table)
    for line in details:
        console.print(escape(line))
    for cause in sorted(causes & FINDINGS.keys()):
        fixed = f" [bold red](fixed in {FIXED[cause]}: a regression)[/]" if cause in FIXED else ""
        console.print(f"  [bold]{cause}[/]{fixed} {escape(FINDINGS[cause])}")
    if "unexplained" in causes:
        console.print("  [bold red]unexplained[/] violations no known finding explains")
