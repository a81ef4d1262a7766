"""Every benchmark still runs (briefly): a benchmark nobody runs rots unseen.

Nothing here measures anything; each module runs with the smallest settings it
takes, against its own local servers, and must exit 0 and print its table.
"""

from __future__ import annotations

import os
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
    "benchmarks.ceiling": (["--seconds", "0.05", "--slices", "1"], "stampede write"),
    # The pure build only: `make test-compiled` builds and checks the compiled one.
    "benchmarks.compiled": (["--rounds", "1", "--seconds", "0.01", "--pure-only"], "read step"),
    "benchmarks.durability": (["--writes", "60", "--concurrency", "4"], "Durability(replicas=1)"),
    "benchmarks.server_cost": (["--groups", "40", "--rounds", "2"], "stampede write (stamp)"),
}


@pytest.mark.parametrize("module", sorted(RUNS))
def test_a_benchmark_runs(module: str) -> None:
    args, expected = RUNS[module]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=240,
        check=False,
    )
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    assert expected in out, out[-3000:]


@pytest.mark.timeout(300)
def test_the_key_census_runs_and_finds_nothing_immortal() -> None:
    """The census (both topologies, a second of load each) prints its tables and
    PASS: nothing here depends on how much load a busy machine manages, and its
    waits for the grace windows follow the servers' clocks."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.census", "--seconds", "1", "--tasks", "8"],
        cwd=ROOT,
        env=env,
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
