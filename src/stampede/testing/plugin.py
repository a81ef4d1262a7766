"""pytest plugin (entry point `stampede`): real Redis servers as fixtures.

Fixtures (every name starts with `stampede_`; none is autouse, so a project that
has stampede installed gets nothing it did not ask for):

`stampede_primaries`  a `LocalPrimaries(3)`, healed and emptied for the test.
`stampede_cluster`    a `LocalCluster(masters=3, replicas=0)`, healed and emptied.
`stampede_session_primaries`, `stampede_session_cluster`
                      the same servers as they are (session scope: started once,
                      shared; use them from fixtures of a wider scope).
`stampede_backend`    "local" (server processes, the default) or "docker".
`stampede_server_binary`  the `ServerBinary` local nodes run (`$STAMPEDE_TEST_SERVER`:
                      redis, valkey, auto or a path; see `stampede.testing.servers`).

Servers start lazily, the first time a test asks for them, and stop at the end of
the session. `stampede_primaries` and `stampede_cluster` heal the shared servers
(resume paused nodes, restart killed ones) and run FLUSHALL on every master before
they hand them to the test, so each test starts from empty, healthy servers.

Backend: `--stampede-redis=local|docker`, else `$STAMPEDE_TEST_REDIS`, else local.
The session header names the server binary and version the local backend runs.
Disable the plugin with `-p no:stampede`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, cast

import pytest

from .servers import SERVER_ENV, ServerBinary, ServerNotFoundError, default_server

if TYPE_CHECKING:  # imported when a fixture needs them: they need redis-py
    from .cluster import LocalCluster
    from .primaries import LocalPrimaries

__all__ = [
    "BACKEND_ENV",
    "backend_of",
    "make_cluster",
    "make_primaries",
    "stampede_backend",
    "stampede_cluster",
    "stampede_primaries",
    "stampede_server_binary",
    "stampede_session_cluster",
    "stampede_session_primaries",
]

BACKEND_ENV = "STAMPEDE_TEST_REDIS"
Backend = Literal["local", "docker"]
_BACKENDS: tuple[Backend, ...] = ("local", "docker")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "stampede_report_header",
        "name the Redis/Valkey server stampede's fixtures start in the report header",
        type="bool",
        default=False,
    )
    group = parser.getgroup("stampede", "stampede Redis test servers")
    group.addoption(
        "--stampede-redis",
        choices=_BACKENDS,
        default=None,
        help=f"where the stampede_primaries/stampede_cluster fixtures run their servers: "
        f"local redis-server processes or docker containers (default: ${BACKEND_ENV} "
        "or local)",
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the server the local fixtures start, so every run's log says what it tested:
    only in projects that ask (`stampede_report_header = true` in their pytest
    settings, `--stampede-redis`, or `$STAMPEDE_TEST_SERVER` / `$STAMPEDE_TEST_REDIS`
    set); a project that merely installed stampede sees nothing."""
    asked = (
        config.getini("stampede_report_header")
        or config.getoption("--stampede-redis") is not None
        or any(os.environ.get(name) for name in (BACKEND_ENV, SERVER_ENV))
    )
    if not asked:
        return None
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


def _harness() -> None:
    """The harness administers its servers with redis-py: say how to get it."""
    try:
        import redis  # noqa: F401
    except ImportError:
        raise pytest.UsageError(
            "stampede's server fixtures need redis-py: pip install 'stampede-redis[testing]'"
        ) from None


def make_primaries(backend: Backend, n: int = 3) -> LocalPrimaries:
    """Unstarted primaries for the backend."""
    _harness()
    if backend == "docker":
        from .docker import DockerPrimaries

        return DockerPrimaries(n)
    from .primaries import LocalPrimaries

    return LocalPrimaries(n)


def make_cluster(backend: Backend, masters: int = 3, replicas: int = 0) -> LocalCluster:
    """An unstarted cluster for the backend."""
    _harness()
    if backend == "docker":
        from .docker import DockerCluster

        return DockerCluster(masters, replicas)
    from .cluster import LocalCluster

    return LocalCluster(masters, replicas)


@pytest.fixture(scope="session")
def stampede_backend(pytestconfig: pytest.Config) -> Backend:
    """'local' or 'docker': where the shared servers run."""
    return backend_of(pytestconfig)


@pytest.fixture(scope="session")
def stampede_server_binary() -> ServerBinary:
    """The server executable local nodes start (per `$STAMPEDE_TEST_SERVER`)."""
    return default_server()


@pytest.fixture(scope="session")
def stampede_session_primaries(stampede_backend: Backend) -> Iterator[LocalPrimaries]:
    """Three independent primaries for the session, as they are."""
    with make_primaries(stampede_backend) as primaries:
        yield primaries


@pytest.fixture(scope="session")
def stampede_session_cluster(stampede_backend: Backend) -> Iterator[LocalCluster]:
    """A three-master cluster for the session, as it is."""
    with make_cluster(stampede_backend) as cluster:
        yield cluster


@pytest.fixture
def stampede_primaries(stampede_session_primaries: LocalPrimaries) -> LocalPrimaries:
    """The session's primaries, healed and emptied for this test."""
    stampede_session_primaries.heal()
    stampede_session_primaries.flushall()
    return stampede_session_primaries


@pytest.fixture
def stampede_cluster(stampede_session_cluster: LocalCluster) -> LocalCluster:
    """The session's cluster, healed and emptied for this test."""
    stampede_session_cluster.heal()
    stampede_session_cluster.flushall()
    return stampede_session_cluster
