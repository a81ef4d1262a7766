"""Every benchmark still runs (briefly): a benchmark nobody runs rots unseen.

Nothing here measures anything; each module runs with the smallest settings it
takes, against its own local servers, and must exit 0 and print its table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUNS = {
    "benchmarks.keyslot": (["--keys", "200", "--rounds", "3"], "keyslot"),
    "benchmarks.core": (["--rounds", "1", "--ops", "20"], "stampede write (counter)"),
    "benchmarks.suite": (
        ["--seconds", "0.01", "--levels", "1", "--only", "shards"],
        "write stamp vs guard",
    ),
    "benchmarks.fanout": (["--rounds", "1", "--ops", "20"], "p50"),
    "benchmarks.repair": (["--groups", "60", "--scan-groups", "200"], "scan:"),
    "benchmarks.ramp": (["--seconds", "0.2", "--only", "shards"], "read_atomic"),
    "benchmarks.ceiling": (
        ["--seconds", "0.05", "--slices", "1", "--cost-groups", "0"],
        "stampede write",
    ),
    # The pure build only: `make test-compiled` builds and checks the compiled one.
    "benchmarks.compiled": (["--rounds", "1", "--seconds", "0.01", "--pure-only"], "read step"),
    "benchmarks.durability": (["--writes", "60", "--concurrency", "4"], "Durability(replicas=1)"),
    "benchmarks.server_cost": (["--groups", "40", "--rounds", "2"], "stampede write (stamp)"),
}
if shutil.which("valgrind") and shutil.which("callgrind_control"):  # it counts with them
    RUNS["benchmarks.server_instructions"] = (["--groups", "20", "--rounds", "2"], "one slot")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}


@pytest.mark.parametrize("module", sorted(RUNS))
def test_a_benchmark_runs(module: str) -> None:
    args, expected = RUNS[module]
    out = _run(module, args)
    assert expected in out, out[-3000:]


def _run(module: str, args: list[str]) -> str:
    """`python -m module args` from the checkout; its stdout, once it exited 0."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    return result.stdout.decode(errors="replace")


def test_the_ceiling_run_measures_every_target(tmp_path: Path) -> None:
    """`benchmarks.ceiling --only stampede` with its transaction rows and its server-cost
    phase: the targets table names every target with a figure, a bound and a verdict,
    and --json holds them. Whether a target is met is not asserted (timing)."""
    from benchmarks.ceiling import GAPS, TARGETS

    out_json = tmp_path / "ceiling.json"
    args = ["--seconds", "0.05", "--slices", "1", "--only", "stampede"]
    args += ["--cost-groups", "40", "--cost-rounds", "2", "--json", str(out_json)]
    out = _run("benchmarks.ceiling", args)
    for row in ("stampede transaction", "stampede write (txn keys)", "MSET"):
        assert row in out, out[-3000:]
    assert "redis-py read" not in out, out[-3000:]
    table = out[out.index("targets (this run)") :]
    for target in TARGETS:
        line = next(line for line in table.splitlines() if target.what in line)
        assert line.rstrip().endswith((" met", " NOT MET")), line
    data = json.loads(out_json.read_text())
    assert [t["target"] for t in data["targets"]] == [t.what for t in TARGETS]
    for target in data["targets"]:
        assert isinstance(target["figure"], float) and target["met"] in (True, False), target
    assert set(data["server_cost"]) == {
        "MSET",
        "stampede write (stamp)",
        "stampede write (commit)",
        "stampede transaction",
    }
    assert {"stampede transaction", "stampede write (txn keys)"} <= set(data["rows"])
    # the ceiling client running the guard script (every key written, else it raises),
    # and checking the stamps it reads (every group whole at setup, else it raises)
    assert {"ceiling guarded write", "ceiling checked read"} <= set(data["rows"]), out[-3000:]
    assert [gap["what"] for gap in data["gaps"]] == [what for what, *_ in GAPS]
    assert all(isinstance(gap["figure"], float) for gap in data["gaps"]), data["gaps"]


def test_the_ceiling_runs_on_uvloop() -> None:
    """`--loop uvloop`: every row on uvloop's event loop, and the run says so."""
    args = ["--seconds", "0.05", "--slices", "1", "--only", "stampede", "--cost-groups", "0"]
    out = _run("benchmarks.ceiling", [*args, "--loop", "uvloop"])
    assert "stampede transaction" in out and '"loop": "uvloop"' in out, out[-3000:]


@pytest.mark.timeout(300)
def test_the_key_census_runs_and_finds_nothing_immortal() -> None:
    """The census (both topologies, a second of load each) prints its tables and
    PASS: nothing here depends on how much load a busy machine manages, and its
    waits for the grace windows follow the servers' clocks."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.census", "--seconds", "1", "--tasks", "8"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        timeout=280,
        check=False,
    )
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out[-3000:] + result.stderr.decode(errors="replace")[-3000:]
    for topology in ("## shards", "## cluster"):
        assert topology in out, out[-3000:]
    assert out.count("| kind | count |") == 4, out[-3000:]  # before and after the sweep, twice
    assert "\nPASS: " in out, out[-3000:]
