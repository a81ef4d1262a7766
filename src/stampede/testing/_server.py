"""The redis-server command line, launching it, and waiting for it to answer."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

START_TIMEOUT = 15.0
CLUSTER_NODE_TIMEOUT_MS = 2000
_WILDCARDS = frozenset({"0.0.0.0", "::", "*"})


def server_args(
    port: int, *, bind: str, directory: str, cluster_enabled: bool, extra_args: Sequence[str]
) -> list[str]:
    """The redis-server command line (after the executable) for one test node."""
    args = ["--port", str(port), "--bind", bind, "--dir", directory]
    args += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""]
    # Replicas sync at once (not after 5 s), and masters ping them every second: Redis
    # 7 hides a replica from CLUSTER SLOTS until its replication offset moves.
    args += ["--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"]
    if cluster_enabled:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS)]
        if bind not in _WILDCARDS:
            args += ["--cluster-announce-ip", bind]
    return [*args, *extra_args]


def admin_retry() -> Retry:
    """No retries: a harness command against a dead or paused node fails at once."""
    return Retry(NoBackoff(), 0)


@functools.cache
def _setpriv() -> str | None:
    """`setpriv` if it can set a parent-death signal (util-linux >= 2.33), else None."""
    path = shutil.which("setpriv")
    if sys.platform != "linux" or path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if b"--pdeathsig" in usage.stdout else None


def launcher() -> list[str]:
    # The parent-death signal fires when the *thread* that spawned the child exits,
    # so it is only safe from the main thread.
    if threading.current_thread() is not threading.main_thread():
        return []
    path = _setpriv()
    return [path, "--pdeathsig", "KILL", "--"] if path else []


def wait_until_answers(
    host: str,
    port: int,
    *,
    alive: Callable[[], bool],
    pid: int | None,
    timeout: float = START_TIMEOUT,
) -> str | None:
    """None once the server answers PING (and INFO names `pid`), else what went wrong.

    The pid check matters: another test run's server may hold the port while ours
    is failing to bind it.
    """
    deadline = time.monotonic() + timeout
    probe = redis.Redis(
        host=host, port=port, socket_timeout=0.25, socket_connect_timeout=1.0, retry=admin_retry()
    )
    try:
        while alive():
            try:
                if probe.ping() and (pid is None or probe.info("server").get("process_id") == pid):
                    return None
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                return f"did not answer within {timeout:g} s"
            time.sleep(0.01)
    finally:
        probe.close()
    return "exited before answering"
