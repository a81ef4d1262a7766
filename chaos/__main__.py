"""`python -m chaos`: run the chaos scenarios and the fuzzers, print the tables."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import click
from rich.console import Console

from .failover_runner import run_failovers
from .failover_scenarios import FAILOVER_FAST, FAILOVER_LONG
from .ramp_edge_report import print_edge_figures
from .runner import run
from .scenarios import FAILOVER_SCENARIOS, FAST, LONG, SCENARIOS


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--long", "long_run", is_flag=True, help="20 s per scenario and 40 groups.")
@click.option(
    "--scenario",
    "names",
    multiple=True,
    type=click.Choice([*(s.name for s in SCENARIOS), *(s.name for s in FAILOVER_SCENARIOS)]),
    help="Run only these scenarios (repeatable) [default: all].",
)
@click.option(
    "--topology",
    "topologies",
    multiple=True,
    type=click.Choice(["shards", "cluster"]),
    help="Run only on these topologies (repeatable) [default: both]; the failover "
    "scenarios run on a cluster with replicas (cluster) or Sentinel primaries (shards).",
)
@click.option(
    "--fuzz-cases",
    type=click.IntRange(min=0),
    default=2500,
    show_default=True,
    help="Hypothesis cases per fuzz target (5 targets); 0 skips fuzzing.",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run each scenario this many times per topology and print the totals.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where histories (JSON lines) and worker logs go [default: a new temporary dir].",
)
@click.option(
    "--export-ramp",
    "export_from",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Instead of running: turn a ramp history (JSON lines) into the text format, "
    "one r(key,value,session,txn) / w(...) per line, check it, and exit 1 on a violation.",
)
@click.option(
    "--to",
    "export_to",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --export-ramp: the file to write [default: stdout].",
)
def main(
    long_run: bool,
    names: tuple[str, ...],
    topologies: tuple[str, ...],
    fuzz_cases: int,
    runs: int,
    workdir: Path | None,
    export_from: Path | None,
    export_to: Path | None,
) -> None:
    """Fault injection and an independent consistency check; exit 1 on any violation."""
    if export_from is not None:
        sys.exit(_export(export_from, export_to))
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    kinds = list(topologies) or ["shards", "cluster"]
    failovers = [
        s
        for s in FAILOVER_SCENARIOS
        if (not names or s.name in names)
        and ("cluster" if s.topology == "cluster" else "shards") in kinds
    ]
    where = workdir or Path(tempfile.mkdtemp(prefix="stampede-chaos-"))
    timing = LONG if long_run else FAST
    started = time.monotonic()
    outcome = run(
        console,
        topologies=kinds if chosen else [],
        scenarios=chosen,
        timing=timing,
        workdir=where,
        fuzz_cases=fuzz_cases,
        runs=runs,
    )
    print_edge_figures(console, outcome.runs)
    failed_over = asyncio.run(
        run_failovers(
            console,
            failovers,
            timing=FAILOVER_LONG if long_run else FAILOVER_FAST,
            workdir=where,
            runs=runs,
        )
    )
    ok = outcome.ok and failed_over.ok
    violations = sum(len(r.report.violations) for r in outcome.runs)
    violations += sum(len(r.report.violations) for r in failed_over.runs)
    console.print()
    verdict = "[bold green]no violation[/]" if ok else "[bold red]FAILED[/]"
    console.print(
        f"{verdict}: {len(outcome.runs) + len(failed_over.runs)} runs, "
        f"{len(outcome.errors) + len(failed_over.errors)} crashed, {violations} violations, "
        f"{len(outcome.fuzz_failures)} unexpected fuzz failures, "
        f"{len(outcome.defects_present)} regressions; "
        f"{time.monotonic() - started:.0f} s; histories in {where}"
    )
    sys.exit(0 if ok else 1)


def _export(source: Path, target: Path | None) -> int:
    from .history import load_events
    from .ramp_checker import check_lines, export_lines

    lines = export_lines(load_events(source))
    text = "".join(line + "\n" for line in lines)
    if target is None:
        sys.stdout.write(text)
    else:
        target.write_text(text, encoding="utf-8")
    violations = check_lines(lines)
    for violation in violations[:20]:
        print(f"{violation.kind}: {violation.message}", file=sys.stderr)
    print(f"{len(lines)} operations, {len(violations)} violations", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    main()
