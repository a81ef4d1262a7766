"""One real redis-server process: start, stop, kill, pause, resume, restart.

Each node runs in its own temporary directory with persistence off
(`--save "" --appendonly no`), so a restart always comes back empty. A cluster
node keeps its `nodes.conf` across `kill()`/`restart()`, so it rejoins its cluster
with the same identity and slots. `stop()` removes the directory.

Orphans are avoided three ways: context managers, a `weakref.finalize` per node
(runs when the node is garbage collected and at interpreter exit), and on Linux,
when `setpriv` is available and the node is started from the main thread, a
parent-death signal so the server is killed even if the test process is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import redis

from ._lifecycle import Addressed, Started
from ._ports import release_port, reserve_free_port, reserve_port
from ._server import admin_retry, launcher, server_args, wait_until_answers
from .errors import ServerStartError
from .servers import SERVER_ENV, default_server

__all__ = ["STOP_TIMEOUT", "NodeOptions", "RedisNode", "stop_nodes"]


STOP_TIMEOUT = 10.0
_PORT_ATTEMPTS = 20
_MARKER = "### stampede: "
_LOG_NAME = "redis.log"
_KEEP_ON_RESTART = frozenset({"nodes.conf", _LOG_NAME})
_IN_USE = "Address already in use"


class NodeOptions(TypedDict, total=False):
    """Keyword options that `LocalPrimaries` and `LocalCluster` pass on to every node."""

    host: str
    redis_server: str | None
    extra_args: Sequence[str]


class _Resources:
    """What must be cleaned up even if a node is never stopped (held by the finalizer)."""

    def __init__(self, *, cluster: bool) -> None:
        self.cluster = cluster
        self.popen: subprocess.Popen[bytes] | None = None
        self.directory: Path | None = None
        self.port: int | None = None  # reserved in this process until released

    def kill(self) -> None:
        popen = self.popen
        if popen is not None:
            if popen.poll() is None:
                popen.kill()  # SIGKILL also ends a SIGSTOPped process
            popen.wait()

    def release(self) -> None:
        self.kill()
        self.popen = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self.port is not None:
            release_port(self.port, cluster=self.cluster)
            self.port = None


class _AddressInUse(Exception):
    pass


def stop_nodes(nodes: Sequence[RedisNode]) -> None:
    """Stop several nodes at once: all are asked first, so their shutdowns overlap.

    Every node is stopped even if one fails; the first failure is raised afterwards.
    """
    errors: list[Exception] = []
    for node in nodes:
        try:
            node.ask_to_stop()
        except Exception as exc:  # collected; the node's own stop() below retries
            errors.append(exc)
    for node in nodes:
        try:
            node.stop()
        except Exception as exc:  # stop the others anyway; report the first failure
            errors.append(exc)
    if errors:
        raise errors[0]


class RedisNode(Started, Addressed):
    """A redis-server process on a free port of `host`, in a private temporary directory."""

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        cluster_enabled: bool = False,
        redis_server: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.cluster_enabled = cluster_enabled
        self.redis_server = redis_server
        self.extra_args = tuple(extra_args)
        self._requested_port = port
        self._port = port
        self._paused = False
        self._res = _Resources(cluster=cluster_enabled)
        self._finalizer = weakref.finalize(self, self._res.release)

    def __repr__(self) -> str:
        where = self.address if self._port is not None else "no port yet"
        state = "paused" if self._paused else "running" if self.is_running else "down"
        return f"<{type(self).__name__} {where} {state}>"

    # -- addresses -------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The TCP port; chosen by `start()` unless one was given."""
        if self._port is None:
            raise RuntimeError("this node has no port yet: call start() first")
        return self._port

    # -- state -----------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (paused counts as running), else None."""
        popen = self._res.popen
        return popen.pid if popen is not None and popen.poll() is None else None

    @property
    def is_running(self) -> bool:
        """True while the process exists, even if it is paused."""
        return self.pid is not None

    @property
    def is_paused(self) -> bool:
        """True between `pause()` and `resume()` (or a kill/restart/stop)."""
        return self._paused and self.is_running

    @property
    def directory(self) -> Path:
        """The node's temporary directory (removed by `stop()`)."""
        if self._res.directory is None:
            raise RuntimeError("this node has no directory yet: call start() first")
        return self._res.directory

    @property
    def log_path(self) -> Path:
        """The server's log file (stdout and stderr of redis-server)."""
        return self.directory / _LOG_NAME

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server log ('' if there is none yet)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, RuntimeError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def client(self, **kwargs: Any) -> redis.Redis:
        """A sync redis-py client to this node: raw bytes, and no retries unless given."""
        options: dict[str, Any] = {"decode_responses": False, "retry": admin_retry()}
        options.update(kwargs)
        return redis.Redis(host=self.host, port=self.port, **options)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and return once it answers; raise `ServerStartError` if not.

        A node that was killed (not stopped) starts again on its port and in its
        directory; unlike `restart()` its files are left alone, so a node given
        persistence through `extra_args` recovers its data. Otherwise a free port is
        picked, and another one tried if redis-server reports the port (or its
        cluster bus port) taken meanwhile.
        """
        if self.is_running:
            raise RuntimeError(f"{self!r} is already running")
        executable = self._executable()
        if self._res.directory is None or not self._res.directory.exists():
            self._res.directory = Path(tempfile.mkdtemp(prefix="stampede-redis-"))
        fixed = self._res.port if self._res.port is not None else self._requested_port
        if fixed is not None:
            reserve_port(fixed, cluster=self.cluster_enabled)
            self._res.port = fixed
            self._launch(executable, fixed, may_move=False)
            return
        for _ in range(_PORT_ATTEMPTS):
            port = reserve_free_port(self.host, cluster=self.cluster_enabled)
            self._res.port = port
            try:
                self._launch(executable, port, may_move=True)
            except _AddressInUse:
                release_port(port, cluster=self.cluster_enabled)
                self._res.port = None
                (self.directory / "nodes.conf").unlink(missing_ok=True)
                continue
            return
        raise ServerStartError(
            f"redis-server found every port taken in {_PORT_ATTEMPTS} tries",
            log_path=self.log_path,
            log_tail=self.log_tail(),
        )

    def stop(self) -> None:
        """Shut the server down gracefully (SIGTERM), then remove its directory."""
        self.ask_to_stop()
        popen = self._res.popen
        if popen is not None and popen.poll() is None:
            try:
                popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                popen.kill()
        self._paused = False
        self._res.release()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its directory and port stay for restart()."""
        self._res.kill()
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing answers until resume()."""
        pid = self._require_running()
        if not self._paused:
            os.kill(pid, signal.SIGSTOP)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WUNTRACED)  # returns once the process has stopped
            self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        pid = self._require_running()
        if self._paused:
            os.kill(pid, signal.SIGCONT)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WCONTINUED)
            self._paused = False

    def restart(self) -> None:
        """Kill the server if it runs and start it again on the same port, with no data.

        A cluster node keeps its nodes.conf, so it rejoins with its id and slots.
        """
        if self._res.port is None or self._res.directory is None:
            raise RuntimeError(f"{self!r} was never started (or was stopped): use start()")
        self.kill()
        for entry in self.directory.iterdir():
            if entry.name not in _KEEP_ON_RESTART:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        self.start()

    # -- internals -------------------------------------------------------------------

    def ask_to_stop(self) -> None:
        """Send SIGTERM (after SIGCONT if paused) without waiting; stop() then waits."""
        popen = self._res.popen
        if popen is not None and popen.poll() is None:
            if self._paused:
                os.kill(popen.pid, signal.SIGCONT)
            popen.terminate()

    def _executable(self) -> str:
        if self.redis_server is None:
            return default_server().path  # ServerNotFoundError is a ServerStartError
        executable = shutil.which(self.redis_server)
        if executable is None:
            raise ServerStartError(
                f"{self.redis_server!r} was not found on PATH. Install Redis "
                "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis), "
                "pass redis_server='/path/to/redis-server', leave it unset to use "
                f"${SERVER_ENV} (redis, valkey or a path), or set STAMPEDE_TEST_REDIS=docker."
            )
        return executable

    def _require_running(self) -> int:
        pid = self.pid
        if pid is None:
            raise RuntimeError(f"{self!r} is not running")
        return pid

    def _arguments(self, port: int) -> list[str]:
        """The command line after the executable (a Sentinel node has its own)."""
        return server_args(
            port,
            bind=self.host,
            directory=str(self.directory),
            cluster_enabled=self.cluster_enabled,
            extra_args=self.extra_args,
        )

    def _launch(self, executable: str, port: int, *, may_move: bool) -> None:
        self._port = port
        argv = [*launcher(), executable, *self._arguments(port)]
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(f"{_MARKER}starting on port {port}: {argv!r}\n")
            log.flush()
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        self._res.popen = popen
        problem = wait_until_answers(
            self.host, port, alive=lambda: popen.poll() is None, pid=popen.pid
        )
        if problem is None:
            return
        if popen.returncode is not None:
            problem = f"exited with status {popen.returncode} before answering"
        self._res.kill()
        attempt = self.log_path.read_text(errors="replace").rpartition(_MARKER)[2]
        if _IN_USE in attempt and may_move:
            raise _AddressInUse
        if _IN_USE in attempt:
            problem += f"; port {port} (or its cluster bus port) is taken by another process"
        raise ServerStartError(
            f"redis-server on {self.host}:{port} {problem}",
            port=port,
            log_path=self.log_path,
            log_tail=self.log_tail(),
        )
