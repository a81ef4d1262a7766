"""The same servers in Docker containers, for machines without a local redis-server.

Selected with `STAMPEDE_TEST_REDIS=docker` (or `--stampede-redis=docker`); needs the
optional extra: `pip install 'stampede-redis[docker]'` (testcontainers).

Run against a real engine by `make docker-check` (tests/integration/test_docker.py,
with STAMPEDE_DOCKER_CHECK=1; docs/testing.md names the engine and versions).

- Primaries: one container per primary, port 6379 mapped to a free host port; with
  `STAMPEDE_TEST_DOCKER_NETWORK=host` (an engine without a bridge network, such as
  the one `make docker-check` starts), host networking on a free port instead.
- Cluster: one container per node with host networking (`network_mode="host"`),
  each on a free host port, announcing 127.0.0.1, so the addresses in CLUSTER SLOTS
  and in MOVED/ASK work from the test process. Host networking needs a Linux Docker
  engine (Docker Desktop supports it only in recent versions, opt-in).

Whatever goes wrong starting a container (no engine, no permission on its socket,
an image that is neither here nor pullable, no bridge network) is a HarnessError
whose message says in one line what is missing.

Containers cannot be killed, paused or restarted through this API:
`kill`/`pause`/`resume`/`restart` raise NotImplementedError. `heal()` has
nothing to do; `flushall()`, `migrate_slot()` and the other admin helpers work as
on the local backend.
"""

from __future__ import annotations

import contextlib
import os
import socket
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

from ._ports import release_port, reserve_free_port
from ._server import server_args, wait_until_answers
from .cluster import LocalCluster
from .errors import HarnessError, ServerStartError
from .node import NodeOptions, RedisNode
from .primaries import LocalPrimaries

__all__ = [
    "DEFAULT_IMAGE",
    "IMAGE_ENV",
    "NETWORK_ENV",
    "DockerCluster",
    "DockerNode",
    "DockerPrimaries",
    "default_image",
    "default_network",
    "engine_problem",
    "explain_start_error",
]


IMAGE_ENV = "STAMPEDE_TEST_REDIS_IMAGE"
NETWORK_ENV = "STAMPEDE_TEST_DOCKER_NETWORK"
DEFAULT_IMAGE = "redis:7.2"
_DEFAULT_SOCKET = "unix:///var/run/docker.sock"
_CONTAINER_PORT = 6379
_NO_SIGNALS = (
    "{what}() is not available on the docker backend: containers are not signalled by "
    "this harness. Run the test with STAMPEDE_TEST_REDIS=local (needs redis-server)."
)


def default_image() -> str:
    """The image to run: $STAMPEDE_TEST_REDIS_IMAGE, else redis:7.2."""
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def default_network() -> str:
    """'bridge' (port mapping, the default) or 'host': $STAMPEDE_TEST_DOCKER_NETWORK."""
    chosen = (os.environ.get(NETWORK_ENV) or "bridge").strip().lower()
    if chosen not in ("bridge", "host"):
        raise HarnessError(f"{NETWORK_ENV}={chosen!r}: expected 'bridge' or 'host'")
    return chosen


def _said(exc: BaseException) -> str:
    """The first line of what docker (or testcontainers) said, kept short."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    first = lines[0].strip()
    return first if len(first) <= 200 else first[:197] + "..."


def explain_start_error(exc: BaseException, image: str) -> str:
    """One line: what is missing when a container could not be started."""
    chain: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(f"{type(seen).__name__} {seen}".lower())
        seen = seen.__cause__ or seen.__context__
    text = " | ".join(chain)
    where = os.environ.get("DOCKER_HOST") or _DEFAULT_SOCKET
    said = f"(docker said: {_said(exc)})"
    if "permission denied" in text:
        return _no_permission(where, said)
    if "ryuk" in text:
        return (
            "testcontainers could not start its Ryuk reaper (its image cannot be pulled "
            "here): set TESTCONTAINERS_RYUK_DISABLED=true, the harness removes its own "
            f"containers {said}"
        )
    if any(
        sign in text
        for sign in ("imagenotfound", "pull access denied", "manifest unknown", "no such image")
    ) or ("/images/" in text and "pull" in text):
        return (
            f"image {image} is not on this engine and could not be pulled: `docker pull "
            f"{image}` where a registry answers, or set {IMAGE_ENV} to a local image "
            f"(`make docker-check` builds stampede-redis:local) {said}"
        )
    if "network" in text and "not found" in text:
        return f"the engine has no bridge network: set {NETWORK_ENV}=host {said}"
    if any(
        sign in text
        for sign in (
            "error while fetching server api version",
            "connection refused",
            "connection aborted",
            "filenotfounderror",
            "no such file or directory",
            "cannot connect to the docker daemon",
        )
    ):
        return _no_engine(where, said)
    return f"could not start a {image} container {said}"


def _no_permission(where: str, said: str) -> str:
    return (
        f"permission denied on the Docker socket {where}: add your user to the "
        f"'docker' group or run as root {said}"
    )


def _no_engine(where: str, said: str) -> str:
    return (
        f"no Docker engine answers at {where}: start Docker, or set DOCKER_HOST to "
        f"a running engine (`make docker-check` starts a private one) {said}"
    )


def engine_problem() -> str | None:
    """None when the engine's unix socket accepts a connection, else what is wrong.

    Checked before docker-py connects: a failed connection there leaves its socket
    unclosed (a ResourceWarning in the caller's test session). Other transports
    (tcp://, ssh://) are left to docker-py.
    """
    where = os.environ.get("DOCKER_HOST") or _DEFAULT_SOCKET
    if not where.startswith("unix://"):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5.0)
        try:
            probe.connect(where.removeprefix("unix://"))
        except PermissionError as exc:
            return _no_permission(where, f"({exc.strerror})")
        except OSError as exc:
            return _no_engine(where, f"({exc.strerror or type(exc).__name__})")
    return None


def _container_class() -> Any:
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise HarnessError(
            "STAMPEDE_TEST_REDIS=docker needs testcontainers: pip install 'stampede-redis[docker]'"
        ) from exc
    return DockerContainer


def _remove(container: Any) -> None:
    with contextlib.suppress(Exception):  # already gone, or the engine went away
        container.stop()


def _running(container: Any) -> bool:
    try:
        container.get_wrapped_container().reload()
        return bool(container.get_wrapped_container().status == "running")
    except Exception:  # the engine could not tell: treat as not running
        return False


class DockerNode(RedisNode):
    """A redis-server in a container, with RedisNode's addresses and client."""

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        cluster_enabled: bool = False,
        redis_server: str | None = "redis-server",
        extra_args: Sequence[str] = (),
        image: str | None = None,
        network: str | None = None,
    ) -> None:
        super().__init__(
            port=port,
            host=host,
            cluster_enabled=cluster_enabled,
            redis_server=redis_server,
            extra_args=extra_args,
        )
        self.image = image or default_image()
        # A cluster node always uses host networking (its announced address must work
        # from the tests); a primary maps its port unless told otherwise.
        self.network = "host" if cluster_enabled else (network or default_network())
        self._container: Any = None
        self._reserved: int | None = None

    @property
    def pid(self) -> int | None:
        """Always None: the process lives in a container."""
        return None

    @property
    def is_running(self) -> bool:
        return self._container is not None

    @property
    def is_paused(self) -> bool:
        return False

    @property
    def container_id(self) -> str | None:
        """The running container's id, or None."""
        if self._container is None:
            return None
        return str(self._container.get_wrapped_container().id)

    @property
    def directory(self) -> Path:
        raise NotImplementedError("a docker node has no local directory; see log_tail()")

    @property
    def log_path(self) -> Path:
        raise NotImplementedError("a docker node has no local log file; see log_tail()")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the container's output."""
        if self._container is None:
            return ""
        try:
            out, err = self._container.get_logs()
        except Exception:  # the container is gone: nothing to show
            return ""
        text = (out + err).decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        """Run the container and return once the server answers PING."""
        if self._container is not None:
            raise RuntimeError(f"{self!r} is already running")
        container_class = _container_class()
        problem = engine_problem()
        if problem is not None:
            raise HarnessError(problem)
        host_network = self.network == "host"
        if host_network:
            port = self._requested_port or reserve_free_port(
                self.host, cluster=self.cluster_enabled
            )
            self._reserved = None if self._requested_port else port
            args = server_args(
                port,
                bind=self.host,
                directory="/data",
                cluster_enabled=self.cluster_enabled,
                extra_args=(),
            )
        else:
            port = _CONTAINER_PORT
            args = server_args(
                port, bind="0.0.0.0", directory="/data", cluster_enabled=False, extra_args=()
            )
            args += ["--protected-mode", "no"]  # clients come in through the port mapping
        command = [self.redis_server or "redis-server", *args, *self.extra_args]
        container: Any = None
        try:  # the client connects to the engine as it is made: keep it inside
            container = container_class(self.image)
            if host_network:
                container.with_kwargs(network_mode="host")
            else:
                container.with_exposed_ports(_CONTAINER_PORT)
            container.with_command(command)
            container.start()
        except Exception as exc:  # docker or testcontainers error; say what is missing
            if container is not None:
                _remove(container)
            self.stop()
            raise HarnessError(explain_start_error(exc, self.image)) from None
        self._container = container
        weakref.finalize(self, _remove, container)
        if not host_network:
            self.host = container.get_container_host_ip()
            port = int(container.get_exposed_port(_CONTAINER_PORT))
        self._port = port
        problem = wait_until_answers(self.host, port, alive=lambda: _running(container), pid=None)
        if problem is not None:
            tail = self.log_tail()
            self.stop()
            raise ServerStartError(
                f"redis-server in {self.image} on {self.host}:{port} {problem}",
                port=port,
                log_tail=tail,
            )

    def stop(self) -> None:
        """Remove the container."""
        if self._container is not None:
            _remove(self._container)
            self._container = None
        if self._reserved is not None:
            release_port(self._reserved, cluster=self.cluster_enabled)
            self._reserved = None

    def kill(self) -> None:
        raise NotImplementedError(_NO_SIGNALS.format(what="kill"))

    def pause(self) -> None:
        raise NotImplementedError(_NO_SIGNALS.format(what="pause"))

    def resume(self) -> None:
        raise NotImplementedError(_NO_SIGNALS.format(what="resume"))

    def restart(self) -> None:
        raise NotImplementedError(_NO_SIGNALS.format(what="restart"))


class DockerPrimaries(LocalPrimaries):
    """`n` primaries, one container each (network: see `default_network()`)."""

    def __init__(
        self,
        n: int = 3,
        *,
        image: str | None = None,
        network: str | None = None,
        **node_kwargs: Unpack[NodeOptions],
    ) -> None:
        self.image = image or default_image()
        self.network = network or default_network()
        super().__init__(n, **node_kwargs)

    def _make_node(self) -> RedisNode:
        return DockerNode(image=self.image, network=self.network, **self._node_kwargs)


class DockerCluster(LocalCluster):
    """A cluster of host-networked containers, one per node, announcing 127.0.0.1."""

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 0,
        *,
        image: str | None = None,
        **node_kwargs: Unpack[NodeOptions],
    ) -> None:
        self.image = image or default_image()
        super().__init__(masters, replicas, **node_kwargs)

    def _make_node(self) -> RedisNode:
        return DockerNode(cluster_enabled=True, image=self.image, **self._node_kwargs)
