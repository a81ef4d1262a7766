"""The defaults and variables the docs promise for each command's options
(docs/operations.md, docs/keys.md): a changed default is a changed promise."""

from __future__ import annotations

from typing import Any

import click
import pytest

from stampede.cli import main


def command(path: str) -> click.Command:
    found: click.Command = main
    for name in path.split():
        assert isinstance(found, click.Group)
        found = found.commands[name]
    return found


DOCUMENTED: list[tuple[str, str, Any]] = [
    # docs/operations.md: the shared connection options
    ("worker", "socket_timeout", 2.0),
    ("worker", "connect_timeout", 1.0),
    ("worker", "check_identity", True),
    ("worker", "stream", "stampede:repairs"),
    # the worker
    ("worker", "max_attempts", 5),
    ("worker", "connect_attempts", 5),
    ("worker", "retry_delay", 1.0),
    ("worker", "retry_max_delay", 60.0),
    ("worker", "job_timeout", 60.0),
    ("worker", "grace", 10.0),
    ("worker", "min_idle", 30.0),
    ("worker", "forget_after", 3600.0),
    ("worker", "dead_max_len", 10_000),
    ("worker", "concurrency", 4),
    ("worker", "health_interval", 15.0),
    ("worker", "sweep_interval", 60.0),
    ("worker", "metrics_host", "127.0.0.1"),
    ("worker", "log_format", "json"),
    ("worker", "log_level", "info"),
    # scan and queue
    ("scan", "mode", "auto"),
    ("scan", "match", "*"),
    ("queue requeue", "count", 10_000),
    # docs/keys.md: the key design commands
    ("lint", "limit", 50),
    ("slots", "shards", 3),
    ("slots", "top", 10),
    ("slots", "method", "auto"),
    ("slots", "scan_count", 1000),
    ("slots", "socket_timeout", 2.0),
    ("slots", "connect_timeout", 1.0),
]


@pytest.mark.parametrize(("path", "name", "default"), DOCUMENTED)
def test_documented_default(path: str, name: str, default: Any) -> None:
    (param,) = (p for p in command(path).params if p.name == name)
    assert param.default == default, (path, name, param.default)


VARIABLES = {
    "STAMPEDE_URLS", "STAMPEDE_CLUSTER", "STAMPEDE_SENTINELS", "STAMPEDE_SERVICES",
    "STAMPEDE_SOCKET_TIMEOUT", "STAMPEDE_CONNECT_TIMEOUT", "STAMPEDE_CHECK_IDENTITY",
    "STAMPEDE_PARTITIONS", "STAMPEDE_STREAM", "STAMPEDE_STRATEGY", "STAMPEDE_CONCURRENCY",
    "STAMPEDE_MAX_ATTEMPTS", "STAMPEDE_RETRY_DELAY", "STAMPEDE_GRACE", "STAMPEDE_BURST",
    "STAMPEDE_METRICS_PORT", "STAMPEDE_LOG_FORMAT", "STAMPEDE_MODE",
}  # fmt: skip
"""The variables docs/operations.md names for `stampede worker`."""


def test_worker_reads_every_documented_variable() -> None:
    read = {p.envvar for p in command("worker").params if isinstance(p.envvar, str)}
    assert VARIABLES <= read, VARIABLES - read
    scan = {p.envvar for p in command("scan").params if isinstance(p.envvar, str)}
    assert "STAMPEDE_MODE" in scan  # read by both worker --mode and scan --mode


def test_slots_and_demo_read_no_server_variables() -> None:
    """`stampede slots` and `stampede demo` take --url and the Sentinel flags, but not
    the variables: they stay on a key sample or servers of their own unless told."""
    for path in ("slots", "demo"):
        names = {p.name: p for p in command(path).params}
        for name in ("urls", "sentinels", "services"):
            assert names[name].envvar is None, (path, name)
