"""A user's first hour: the readiness check and connection keywords where people
reach for them (issue: a user's first hour and an operator's first night)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stampede
from stampede import ConfigurationError, Stampede
from stampede.options import ConnectOptions
from stampede.testing import LocalCluster, LocalPrimaries

from ..support import FAST


async def test_ping_reports_every_shard(st: Stampede) -> None:
    """`await st.ping()`: each shard's round trip in seconds, ok while all answer."""
    health = await st.ping()
    assert health.ok and set(health.latency) == set(st.topology.shard_names)
    assert all(0 <= t < 60 for t in health.latency.values()) and health.errors == {}


async def test_ping_names_a_shard_that_does_not_answer() -> None:
    """A shard nobody answers is in `errors` (no exception): ok is False."""
    st = stampede.connect(["redis://127.0.0.1:1"], connection=FAST)
    health = await st.ping(within=1.0)
    await st.aclose()
    assert not health.ok and list(health.errors) == ["127.0.0.1:1"]


def test_connection_keywords_can_be_given_flat() -> None:
    """connect(urls, socket_timeout=1) sets the connection option (it used to say
    "Extra inputs are not permitted"); a misspelt one lists the known names."""
    st = stampede.connect(["redis://a:1"], socket_timeout=1, connect_timeout=0.2)
    assert st.options.connection.socket_timeout == 1.0
    assert st.options.connection.connect_timeout == 0.2
    both = stampede.connect(
        ["redis://a:1"], connection=ConnectOptions(max_connections=7), socket_timeout=3
    )
    assert both.options.connection.max_connections == 7
    assert both.options.connection.socket_timeout == 3
    with pytest.raises(ConfigurationError, match=r"known options: .*socket_timeout"):
        stampede.connect(["redis://a:1"], sockettimeout=1)


def test_the_pytest_plugin_is_silent_in_projects_that_did_not_ask(tmp_path: Path) -> None:
    """A project that only installed stampede sees no header line of its plugin; one
    that sets `stampede_report_header = true` gets the server named."""
    (tmp_path / "test_x.py").write_text("def test_x() -> None:\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAMPEDE_")}
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)]
    quiet = subprocess.run(args, capture_output=True, cwd=tmp_path, env=env, check=False)
    assert quiet.returncode == 0 and b"stampede test server" not in quiet.stdout
    (tmp_path / "pytest.ini").write_text("[pytest]\nstampede_report_header = true\n")
    asked = subprocess.run(args, capture_output=True, cwd=tmp_path, env=env, check=False)
    assert asked.returncode == 0 and b"stampede test server" in asked.stdout


def test_python_dash_m_stampede_is_the_command_line() -> None:
    """`python -m stampede` runs the same command line as the `stampede` script."""
    done = subprocess.run(
        [sys.executable, "-m", "stampede", "keyslot", "user:{42}:profile"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"slot=8000" in done.stdout


# --- the command line: advice in flags, runtime failures in one line (items 10, 11) ---


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m stampede ARGS` to the end; text output."""
    return subprocess.run(
        [sys.executable, "-m", "stampede", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


PYTHON_ADVICE = ("cluster=True", "ConnectOptions", "check_identity=", "sentinels=", "connect(")


def runtime_failure(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The one `error: ...` line of a runtime failure: no usage text, no Python advice."""
    err = done.stderr
    assert done.returncode == code, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Try " not in err and "Usage:" not in err and "Traceback" not in err, err
    assert not any(word in err for word in PYTHON_ADVICE), err
    return err


def test_a_cluster_node_without_cluster_names_the_flag(
    stampede_cluster: LocalCluster, stampede_primaries: LocalPrimaries
) -> None:
    """Every command that connects refuses a cluster node listed as a primary with
    `pass --cluster` (the library says `cluster=True`), as a runtime failure: exit 1
    (scan and demo: 3, "did not run to the end", their 1 being torn groups found),
    one `error:` line; and --cluster against a plain server says `drop --cluster`."""
    node = ["--url", stampede_cluster.url]
    for args, code in [
        (["slots", *node], 1),
        (["queue", "stats", *node], 1),
        (["worker", *node, "--strategy", "newest-wins", "--burst"], 1),
        (["scan", *node, "--group-pattern", "(?P<group>x)"], 3),
        (["demo", *node, "--duration", "0"], 3),  # docs/troubleshooting.md lists it too
    ]:
        err = runtime_failure(cli(*args), code)
        assert "is a Redis Cluster node; pass --cluster" in err, err
    plain = ["--url", stampede_primaries.urls[0], "--cluster"]
    err = runtime_failure(cli("worker", *plain, "--strategy", "newest-wins", "--burst"))
    assert "drop --cluster" in err


def test_the_identity_check_names_its_flag(stampede_primaries: LocalPrimaries) -> None:
    """URLs in another order than the data was written with: the refusal says
    `--no-check-identity` (not `ConnectOptions(check_identity=False)`), and that flag
    exists and skips the check."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    swapped = [a for url in reversed(stampede_primaries.urls) for a in ("--url", url)]
    scan = ["scan", "--group-pattern", "(?P<group>x)", "--match", "nothing:*"]
    assert cli(*scan, *urls).returncode == 0  # the records now hold this order
    err = runtime_failure(cli(*scan, *swapped), 3)
    assert "pass --no-check-identity" in err and "in another order" in err
    assert cli(*scan, *swapped, "--no-check-identity").returncode == 0


def test_names_and_defaults_agree(stampede_primaries: LocalPrimaries) -> None:
    """--socket-timeout defaults to ConnectOptions' value; scan's grouping regex is
    --group-pattern (--pattern still works, with a warning); $STAMPEDE_MODE is the one
    mode variable ($STAMPEDE_SCAN_MODE still works, with a warning); the worker's
    refusal of the demo's 'refetch' says what refetch needs."""
    default = ConnectOptions().socket_timeout
    for command in ("scan", "worker", "queue stats"):
        shown = " ".join(cli(*command.split(), "--help").stdout.split())
        assert f"STAMPEDE_SOCKET_TIMEOUT; default: {default}" in shown, command
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    scan = ["scan", *urls, "--match", "nothing:*", "--json"]
    old = cli(*scan, "--pattern", "(?P<group>x)")
    assert old.returncode == 0 and "--pattern is deprecated: use --group-pattern" in old.stderr
    new = cli(*scan, "--group-pattern", "(?P<group>x)", env={"STAMPEDE_MODE": "stamp"})
    assert new.returncode == 0 and new.stderr == "", new.stderr
    assert json.loads(new.stdout)["mode"] == "stamp"
    legacy = cli(*scan, "--group-pattern", "(?P<group>x)", env={"STAMPEDE_SCAN_MODE": "stamp"})
    assert legacy.returncode == 0 and json.loads(legacy.stdout)["mode"] == "stamp"
    assert "$STAMPEDE_SCAN_MODE is deprecated: set $STAMPEDE_MODE" in legacy.stderr
    missing = cli("scan", *urls)
    assert missing.returncode == 2 and "Missing option '--group-pattern'" in missing.stderr
    refetch = cli("worker", *urls, "--strategy", "refetch")
    assert refetch.returncode == 2 and "Refetch(load)" in refetch.stderr
