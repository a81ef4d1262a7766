"""Every program in examples/ runs green, as a real subprocess, on both topologies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stampede.testing import LocalCluster, LocalPrimaries

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The web service has its own test (tests/integration/test_fastapi_service.py) and needs FastAPI.
NAMES = sorted(
    p.stem
    for p in EXAMPLES.glob("*.py")
    if not p.stem.startswith("_") and p.stem != "fastapi_service"
)
TIMEOUT = 30


def launch(name: str, *args: str) -> subprocess.Popen[str]:
    """Start `python examples/<name>.py *args`."""
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for `proc`; its exit status, stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -1, out, err + "\n(timed out)"
    return proc.returncode, out, err


def test_examples_were_found() -> None:
    """The examples folder holds the eight documented programs."""
    assert len(NAMES) == 8, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_on_primaries_and_cluster(
    name: str, stampede_primaries: LocalPrimaries, stampede_cluster: LocalCluster
) -> None:
    """The example exits 0 against 3 independent primaries and against a 3-master cluster."""
    shard_args = [arg for url in stampede_primaries.urls for arg in ("--url", url)]
    running = {
        "primaries": launch(name, *shard_args),
        "cluster": launch(name, "--url", stampede_cluster.url, "--cluster"),
    }
    for topology, proc in running.items():
        code, out, err = finish(proc)
        assert code == 0, f"{name} failed on {topology}:\n{out}\n{err}"
        assert out.rstrip().endswith("ok"), out


def test_example_starts_its_own_servers_without_a_url() -> None:
    """Given no --url, an example starts three local primaries of its own and runs on them."""
    code, out, err = finish(launch("wallet_watch"))
    assert code == 0, f"{out}\n{err}"


def test_example_failure_exits_non_zero() -> None:
    """An example that cannot do its job exits with status 1 and says FAILED."""
    code, _, err = finish(launch("inventory", "--url", "redis://127.0.0.1:1"))
    assert code == 1 and "FAILED" in err


def test_every_example_is_documented() -> None:
    """examples/README.md and docs/patterns.md both describe every example."""
    readme = (EXAMPLES / "README.md").read_text()
    guide = (EXAMPLES.parent / "docs" / "patterns.md").read_text()
    for name in NAMES:
        assert f"{name}.py" in readme and f"{name}.py" in guide, name
