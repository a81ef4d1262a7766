"""`stampede worker` and `stampede scan`: the repair worker and the live audit."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator

import click
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from .. import metrics
from .._client import Stampede
from ..errors import ConfigurationError, ShardError, StampedeError
from ..options import ConnectOptions
from ..repair._loading import BUILTIN, open_strategy, resolve_strategy
from ..repair._queue import RepairQueue
from ..repair._worker import RetryBackoff, Worker, serve_metrics
from ..repair._worker_loops import consumer_name
from ..repair._worker_record import event
from ..topology import cluster_mode
from ..typing import RepairStrategy
from ..verdict import Mode
from ._common import Spec, options
from ._connection import Where, unreachable, with_connection
from ._errors import Failure, fail, usage
from ._logs import log_options, setup_logging
from ._params import FiniteRange, utf8_name
from ._stopper import Stopper
from ._supervise import CHILD_ENV, supervise

__all__ = ["worker_command"]


async def _plain_server(url: str, options: ConnectOptions) -> bool:
    """Whether `url` answers as a server with cluster mode off (INFO cluster)."""
    return await cluster_mode(url, options) is False


async def _metrics(worker: Worker, port: int | None, host: str) -> asyncio.Server | None:
    """The metrics endpoint, when a port is given; a port in use is one clear line."""
    if port is None:
        return None
    try:
        return await serve_metrics(worker, port, host)
    except OSError as exc:  # found running: not a usage error
        fix = (
            "give --metrics-host an address of this host (127.0.0.1, 0.0.0.0, ...)"
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
            else "pick another --metrics-port, or stop what listens there"
        )
        raise Failure(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); {fix}"
        ) from None


UNREACHABLE_EXIT = 3
"""The worker's exit status when no server answered at start (after its attempts)."""


class Unreachable(Exception):
    """No server answered `open()` in the worker's connection attempts."""


async def _open(st: Stampede, where: Where, attempts: int) -> None:
    """Open the connection. Misconfiguration is fatal at once; an unreachable server
    is tried `attempts` times with backoff (about a second apart, as arq does), then
    `Unreachable`. A shard that goes down later is the worker's to wait out."""
    last: BaseException | None = None
    for attempt in range(attempts):
        try:
            await st.open()
            return
        except ConfigurationError as exc:  # e.g. SetupError: the URLs do not fit the servers
            if not unreachable(exc):
                raise
            last = exc
        except ShardError as exc:
            if where.cluster and await _plain_server(where.urls[0], where.connection):
                raise ConfigurationError(
                    f"{where.urls[0]} is a plain Redis server (cluster_enabled:0), not a "
                    "cluster node: drop --cluster and give one --url per primary"
                ) from None
            last = exc
        event(
            "worker.connect_failed",
            logging.WARNING,
            error=str(last),
            attempt=attempt + 1,
            attempts=attempts,
        )
        if attempt + 1 < attempts:
            await asyncio.sleep(min(5.0, 0.25 * 2**attempt))
    raise Unreachable(str(last))


_SECONDS = FiniteRange(min=0)
_WORKER_OPTIONS: dict[str | tuple[str, ...], Spec] = {
    "--strategy": (
        None,
        None,
        "'newest-wins', or 'module:name': a strategy instance, or a factory (possibly "
        "async, or returning an async context manager) run in the worker's event loop. The "
        "current directory is on the import path.",
        {"required": True, "metavar": "SPEC", "show_default": False},
    ),
    "--processes": (
        click.IntRange(1, 256),
        1,
        "Run N worker processes under one supervisor, which forwards SIGTERM/SIGINT to "
        "them, restarts one that crashes (with backoff) and exits when all have exited. "
        "Child i serves its metrics on --metrics-port + i and is consumer <--consumer>-i.",
    ),
    "--connect-attempts": (
        click.IntRange(1, 1000),
        5,
        "Tries to reach the servers at start (backing off up to 5 s between them) before "
        f"the worker gives up with exit status {UNREACHABLE_EXIT}.",
    ),
    "--mode": (
        click.Choice(["stamp", "commit"]),
        "stamp",
        "How groups are judged when a job does not say (jobs carry their own).",
    ),
    "--concurrency": (click.IntRange(1, 1024), 4, None),
    "--consumer": (
        None,
        None,
        "Consumer name [default: host-pid].",
        {"show_default": False, "callback": utf8_name},
    ),
    "--max-attempts": (click.IntRange(1, 100), 5, None),
    "--retry-delay": (
        _SECONDS,
        1.0,
        "Seconds before the first retry of a failed job; each retry doubles it, less "
        "up to half at random (0: retry at once).",
    ),
    "--retry-max-delay": (_SECONDS, 60.0, "The longest delay between two attempts of a job."),
    "--job-timeout": (
        _SECONDS,
        60.0,
        "Seconds one attempt at a job may take (a hung loader); past it the attempt "
        "fails and is retried, then dead-lettered, as any failure (0: no limit).",
    ),
    "--sweep-interval": (
        _SECONDS,
        60.0,
        "Seconds between sweeps that collect read-atomic transactions' old versions "
        "of keys no longer written (0: never).",
    ),
    "--tombstone-grace": (
        FiniteRange(min=0, min_open=True),
        300.0,
        "Seconds the tombstones of a repair's delete keep late older writes out: the "
        "application's Options.tombstone_grace.",
    ),
    "--min-idle": (
        FiniteRange(min=0.1),
        30.0,
        "Seconds before a job of a dead worker is taken over.",
    ),
    "--dead-max-len": (
        click.IntRange(min=1),
        10_000,
        "Dead letters kept: past it the oldest are trimmed (approximately: a few more "
        "stay until a whole block of old ones can go).",
    ),
    "--forget-after": (
        FiniteRange(min=1),
        3600.0,
        "Seconds after which a consumer holding no job (a worker that is gone) is "
        "removed from the consumer group; workers check at start and every minute.",
    ),
    "--grace": (
        _SECONDS,
        10.0,
        "Seconds the jobs in hand get to finish on SIGTERM before they are handed back.",
    ),
    "--burst": (
        None,
        False,
        "Drain the queue and exit: stop once nothing is left to claim, in hand or "
        "waiting for a retry.",
        {"is_flag": True, "show_default": False},
    ),
    "--metrics-port": (
        click.IntRange(0, 65535),
        None,
        "Serve /metrics (Prometheus) and /healthz on this port.",
        {"show_default": False},
    ),
    "--metrics-host": (
        None,
        "127.0.0.1",
        "Address the metrics port binds; 0.0.0.0 lets a scraper outside the host "
        "or container reach it.",
    ),
    "--health-interval": (
        FiniteRange(min=0.1),
        15.0,
        "Seconds between health lines in the log.",
    ),
}
"""`stampede worker`'s own options, in `--help` order; each also `$STAMPEDE_<NAME>`."""


@click.command("worker")
@with_connection
@options(_WORKER_OPTIONS, env=True)
@log_options("info")
def worker_command(
    where: Where,
    strategy: str,
    processes: int,
    connect_attempts: int,
    mode: str,
    concurrency: int,
    consumer: str | None,
    max_attempts: int,
    retry_delay: float,
    retry_max_delay: float,
    job_timeout: float,
    sweep_interval: float,
    tombstone_grace: float,
    min_idle: float,
    dead_max_len: int,
    forget_after: float,
    grace: float,
    burst: bool,
    metrics_port: int | None,
    metrics_host: str,
    health_interval: float,
    log_level: str,
    log_format: str,
) -> None:
    """Drain the repair stream: re-read, repair, ack; retry failures after a growing
    delay, dead-letter what keeps failing.

    SIGTERM or SIGINT stops taking jobs, lets the jobs in hand finish (--grace), runs
    the strategy's shutdown and exits 0; a second Ctrl-C hands the jobs still in hand
    back at once and exits 130. Every option can also be set by the environment
    variable shown in its help.
    """
    log = setup_logging(log_level, log_format)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    _check_strategy(strategy)  # import errors are usage errors, before connecting
    try:
        backoff = RetryBackoff(base=retry_delay, max_delay=retry_max_delay)
    except ConfigurationError as exc:
        raise usage(exc, option="--retry-delay") from None
    _check_ports(metrics_port, processes)
    _check_consumer(consumer)
    st = where.connect()
    child = os.environ.get(CHILD_ENV)
    if processes > 1 and child is None:
        sys.exit(supervise(processes))
    metrics_port, consumer = _as_child(child, metrics_port, consumer)

    stopped: list[Stopper] = []  # set once the worker takes signals

    async def run() -> None:
        try:
            async with _strategy(strategy) as repair:  # a bad --strategy: before Redis
                await _open(st, where, connect_attempts)
                queue = RepairQueue(
                    st.topology,
                    name=where.stream,
                    partitions=where.partitions,
                    max_attempts=max_attempts,
                    min_idle=min_idle,
                    dead_max_len=dead_max_len,
                    forget_after=forget_after,
                )
                with contextlib.suppress(ShardError):  # a shard down: the worker waits it out
                    await queue.stats()  # a queue key of another type: refused at once
                registry = CollectorRegistry()
                for collector in (ProcessCollector, PlatformCollector, GCCollector):
                    collector(registry=registry)
                metrics.mount(registry)
                worker = Worker(
                    st.topology,
                    queue,
                    repair,
                    concurrency=concurrency,
                    consumer=consumer,
                    mode=Mode(mode),
                    versions=st.versions,
                    health_interval=health_interval,
                    block_ms=int(min(1.0, where.socket_timeout / 2) * 1000),
                    grace=grace,
                    backoff=backoff,
                    burst=burst,
                    registry=registry,
                    sweep_interval=sweep_interval,
                    version_grace=st.options.version_grace,
                    tombstone_grace=tombstone_grace,
                    job_timeout=job_timeout,
                )
                loop = asyncio.get_running_loop()
                stopped.append(Stopper(worker, grace, log))
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, stopped[0], sig)
                server = await _metrics(worker, metrics_port, metrics_host)
                try:
                    await worker.run()
                finally:
                    if server is not None:
                        server.close()
                        await server.wait_closed()
        finally:
            await st.aclose()

    try:
        asyncio.run(run())
    except Unreachable as exc:
        servers = ", ".join(where.urls or where.sentinels)
        fail(
            f"no server answered ({servers}) after {connect_attempts} attempts: {exc}",
            exit_code=UNREACHABLE_EXIT,
        )
    except BadStrategy as exc:  # what --strategy names does not build a strategy
        raise usage(exc.args[0], option="--strategy") from None
    except StampedeError as exc:  # found running (servers refusing the set-up, ...)
        fail(exc)
    if stopped:  # 130 after a second Ctrl-C, 141 once the log's reader has gone
        stopped[0].finish()


def _as_child(
    child: str | None, metrics_port: int | None, consumer: str | None
) -> tuple[int | None, str | None]:
    """Child i of --processes N: its own metrics port (0: any) and consumer name."""
    if child is None:
        return metrics_port, consumer
    index = int(child)
    port = metrics_port + index if metrics_port else metrics_port
    return port, None if consumer is None else f"{consumer}-{index}"


_NOT_FOR_THE_WORKER = {
    "refetch": "'refetch' needs a loader that reads your database, which a name alone "
    "cannot give: write a factory returning Refetch(load), e.g. 'myapp.repairs:make_strategy' "
    "(docs/repair.md). (The demo's refetch reads the demo's own in-memory database.)",
    "enqueue": "'enqueue' hands a torn group to the repair stream, which is what this "
    "worker drains: give the strategy that repairs it ('newest-wins' or 'module:factory').",
}
"""The demo's strategies that the worker cannot take by name, and why."""


class BadStrategy(Exception):
    """What --strategy names could not be built (its message says why)."""


def _check_consumer(consumer: str | None) -> None:
    """An empty --consumer is a usage error, not a fall-back to the default name."""
    try:
        consumer_name(consumer)
    except ConfigurationError as exc:
        raise usage(exc, option="--consumer") from None


def _check_ports(metrics_port: int | None, processes: int) -> None:
    """A usage error when child i's metrics port, --metrics-port + i, passes 65535."""
    if metrics_port and metrics_port + processes - 1 > 65535:
        raise usage(
            f"--processes {processes} serve metrics on ports {metrics_port}.."
            f"{metrics_port + processes - 1}, past 65535: give a --metrics-port of at most "
            f"{65536 - processes} (or 0: any free port each)",
            option="--metrics-port",
        )


def _check_strategy(spec: str) -> None:
    """A usage error now for a --strategy that cannot load (before any connection)."""
    if spec in _NOT_FOR_THE_WORKER:
        raise usage(_NOT_FOR_THE_WORKER[spec], option="--strategy")
    try:
        if spec not in BUILTIN:
            resolve_strategy(spec)
    except ConfigurationError as exc:
        raise usage(exc, option="--strategy") from None


@contextlib.asynccontextmanager
async def _strategy(spec: str) -> AsyncIterator[RepairStrategy]:
    """`open_strategy(spec)`; what fails while building it is `BadStrategy`."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            repair = await stack.enter_async_context(open_strategy(spec))
        except ConfigurationError as exc:
            raise BadStrategy(str(exc)) from None
        yield repair
