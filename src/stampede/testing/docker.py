"""The same servers in Docker containers, for machines without a local redis-server.

Selected with `STAMPEDE_TEST_REDIS=docker` (or `--stampede-redis=docker`); needs the
optional extra: `pip install 'stampede[docker]'` (testcontainers).

NOT TESTED: the machine this harness was written on has no Docker engine, so no
line of this module has been run against real containers. The local backend
(`node.py`, `primaries.py`, `cluster.py`) is the tested one.

- Primaries: one container per primary, port 6379 mapped to a free host port.
- Cluster: one container per node with host networking (`network_mode="host"`),
  each on a free host port, announcing 127.0.0.1, so the addresses in CLUSTER SLOTS
  and in MOVED/ASK work from the test process. Host networking needs a Linux Docker
  engine (Docker Desktop supports it only in recent versions, opt-in).

Containers cannot be killed, paused or restarted through this API:
`kill`/`pause`/`resume`/`restart` raise NotImplementedError. `heal()` has
nothing to do; `flushall()`, `migrate_slot()` and the other admin helpers work as
on the local backend.
"""

from __future__ import annotations

import contextlib
import os
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
    "DockerCluster",
    "DockerNode",
    "DockerPrimaries",
    "default_image",
]


IMAGE_ENV = "STAMPEDE_TEST_REDIS_IMAGE"
DEFAULT_IMAGE = "redis:7.2"
_CONTAINER_PORT = 6379
_NO_SIGNALS = (
    "{what}() is not available on the docker backend: containers are not signalled by "
    "this harness. Run the test with STAMPEDE_TEST_REDIS=local (needs redis-server)."
)


def default_image() -> str:
    """The image to run: $STAMPEDE_TEST_REDIS_IMAGE, else redis:7.2."""
    return os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE


def _container_class() -> Any:
    try:
        from testcontainers.core.container import DockerContainer
    except ImportError as exc:
        raise HarnessError(
            "STAMPEDE_TEST_REDIS=docker needs testcontainers: pip install 'stampede[docker]'"
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
    """A redis-server in a container, with RedisNode's addresses and client (untested here)."""

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        cluster_enabled: bool = False,
        redis_server: str | None = "redis-server",
        extra_args: Sequence[str] = (),
        image: str | None = None,
    ) -> None:
        super().__init__(
            port=port,
            host=host,
            cluster_enabled=cluster_enabled,
            redis_server=redis_server,
            extra_args=extra_args,
        )
        self.image = image or default_image()
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
        if self.cluster_enabled:
            port = self._requested_port or reserve_free_port(self.host, cluster=True)
            self._reserved = None if self._requested_port else port
            args = server_args(
                port, bind=self.host, directory="/data", cluster_enabled=True, extra_args=()
            )
            container = container_class(self.image).with_kwargs(network_mode="host")
        else:
            port = _CONTAINER_PORT
            args = server_args(
                port, bind="0.0.0.0", directory="/data", cluster_enabled=False, extra_args=()
            )
            args += ["--protected-mode", "no"]  # clients come in through the port mapping
            container = container_class(self.image).with_exposed_ports(_CONTAINER_PORT)
        container.with_command([self.redis_server or "redis-server", *args, *self.extra_args])
        try:
            container.start()
        except Exception as exc:  # docker or testcontainers error; say what to check
            self.stop()
            raise HarnessError(
                f"could not start a {self.image} container ({exc}); is a Docker engine "
                "running and reachable (DOCKER_HOST)?"
            ) from exc
        self._container = container
        weakref.finalize(self, _remove, container)
        if not self.cluster_enabled:
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
            release_port(self._reserved, cluster=True)
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
    """`n` primaries, one container each (untested here: no Docker engine)."""

    def __init__(
        self, n: int = 3, *, image: str | None = None, **node_kwargs: Unpack[NodeOptions]
    ) -> None:
        self.image = image or default_image()
        super().__init__(n, **node_kwargs)

    def _make_node(self) -> RedisNode:
        return DockerNode(image=self.image, **self._node_kwargs)


class DockerCluster(LocalCluster):
    """A cluster of host-networked containers (untested here: no Docker engine)."""

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
