"""pytest plugin (entry point `stampede`): real Redis servers as session fixtures.

Fixtures
--------
`redis_primaries`  a started `LocalPrimaries(3)`, shared by the whole session.
`redis_cluster`    a started `LocalCluster(masters=3, replicas=0)`, shared likewise.
`redis_backend`    "local" (server processes, the default) or "docker".
`redis_server_binary`  the `ServerBinary` local nodes run (`$STAMPEDE_TEST_SERVER`:
                   redis, valkey, auto or a path; see `stampede.testing.servers`).

Servers start lazily, the first time a test asks for them, and stop at the end of
the session. Before every test that uses one of them (directly or through another
fixture), an autouse fixture heals it (resumes paused nodes, restarts killed ones)
and runs FLUSHALL on every master, so each test starts from empty, healthy servers.

Backend: `--stampede-redis=local|docker`, else `$STAMPEDE_TEST_REDIS`, else local.
The session header names the server binary and version the local backend runs.
Disable the plugin with `-p no:stampede`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal, cast

import pytest

from .cluster import LocalCluster
from .primaries import LocalPrimaries
from .servers import ServerBinary, ServerNotFoundError, default_server

BACKEND_ENV = "STAMPEDE_TEST_REDIS"
Backend = Literal["local", "docker"]
_BACKENDS: tuple[Backend, ...] = ("local", "docker")
_SHARED = ("redis_primaries", "redis_cluster")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stampede", "stampede Redis test servers")
    group.addoption(
        "--stampede-redis",
        choices=_BACKENDS,
        default=None,
        help=f"where the redis_primaries/redis_cluster fixtures run their servers: "
        f"local redis-server processes or docker containers (default: ${BACKEND_ENV} "
        "or local)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    """Name the server the local fixtures start, so every run's log says what it tested."""
    try:
        return f"stampede test server: {default_server().describe()}"
    except ServerNotFoundError as exc:
        return f"stampede test server: none ({exc})"


def backend_of(config: pytest.Config) -> Backend:
    """The backend chosen by option, environment variable, or the default (local)."""
    chosen = config.getoption("stampede_redis") or os.environ.get(BACKEND_ENV) or "local"
    value = chosen.strip().lower()
    if value not in _BACKENDS:
        raise pytest.UsageError(f"{BACKEND_ENV}={chosen!r}: expected 'local' or 'docker'")
    return cast(Backend, value)


def make_primaries(backend: Backend, n: int = 3) -> LocalPrimaries:
    """Unstarted primaries for the backend."""
    if backend == "docker":
        from .docker import DockerPrimaries

        return DockerPrimaries(n)
    return LocalPrimaries(n)


def make_cluster(backend: Backend, masters: int = 3, replicas: int = 0) -> LocalCluster:
    """An unstarted cluster for the backend."""
    if backend == "docker":
        from .docker import DockerCluster

        return DockerCluster(masters, replicas)
    return LocalCluster(masters, replicas)


@pytest.fixture(scope="session")
def redis_backend(pytestconfig: pytest.Config) -> Backend:
    """'local' or 'docker': where the shared servers run."""
    return backend_of(pytestconfig)


@pytest.fixture(scope="session")
def redis_server_binary() -> ServerBinary:
    """The server executable local nodes start (per `$STAMPEDE_TEST_SERVER`)."""
    return default_server()


@pytest.fixture(scope="session")
def redis_primaries(redis_backend: Backend) -> Iterator[LocalPrimaries]:
    """Three independent primaries for the session; emptied and healed before each test."""
    with make_primaries(redis_backend) as primaries:
        yield primaries


@pytest.fixture(scope="session")
def redis_cluster(redis_backend: Backend) -> Iterator[LocalCluster]:
    """A three-master cluster for the session; emptied and healed before each test."""
    with make_cluster(redis_backend) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _stampede_reset_redis(request: pytest.FixtureRequest) -> None:
    """Heal and FLUSHALL the shared servers this test uses, before it runs."""
    for name in _SHARED:
        if name in request.fixturenames:
            servers = request.getfixturevalue(name)
            # A project may override the fixture with something else: leave that alone.
            if isinstance(servers, LocalPrimaries | LocalCluster):
                servers.heal()
                servers.flushall()
