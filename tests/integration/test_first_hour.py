"""A user's first hour: the readiness check and connection keywords where people
reach for them (issue: a user's first hour and an operator's first night)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stampede
from stampede import ConfigurationError, Stampede
from stampede.options import ConnectOptions

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
