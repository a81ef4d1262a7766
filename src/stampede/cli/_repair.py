"""`stampede worker` and `stampede scan`: the repair worker and the live audit."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import click
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from .. import metrics
from .._client import Stampede
from ..errors import ConfigurationError, ShardError, StampedeError
from ..options import ConnectOptions
from ..repair._loading import BUILTIN, open_strategy, resolve_strategy
from ..repair._queue import RepairQueue
from ..repair._worker import RetryBackoff, Worker, event, serve_metrics
from ..topology import cluster_mode
from ..verdict import Mode
from ._common import Where, from_env, setting, unreachable, with_connection
from ._logs import log_options, setup_logging

__all__ = ["worker_command"]


async def _plain_server(url: str, socket_timeout: float) -> bool:
    """Whether `url` answers as a server with cluster mode off (INFO cluster)."""
    options = ConnectOptions(socket_timeout=socket_timeout, connect_timeout=socket_timeout)
    return await cluster_mode(url, options) is False


async def _open(st: Stampede, where: Where) -> None:
    """Open the connection; misconfiguration is fatal, an unreachable server is not (the
    worker keeps trying, as it does when a shard goes down later)."""
    try:
        await st.open()
    except ConfigurationError as exc:  # e.g. SetupError: the URLs do not fit the servers
        if not unreachable(exc):
            raise
        event("worker.connect_failed", logging.WARNING, error=str(exc))
    except ShardError as exc:
        if where.cluster and await _plain_server(where.urls[0], where.socket_timeout):
            raise ConfigurationError(
                f"{where.urls[0]} is a plain Redis server (cluster_enabled:0), not a cluster node: "
                "drop --cluster and give one --url per primary"
            ) from None
        event("worker.connect_failed", logging.WARNING, error=str(exc))


@click.command("worker")
@with_connection
@click.option(
    "--strategy",
    required=True,
    metavar="SPEC",
    **from_env("STRATEGY"),
    help="'newest-wins', or 'module:name': a strategy instance, or a factory (possibly "
    "async, or returning an async context manager) run in the worker's event loop. The "
    "current directory is on the import path.",
)
@setting(
    "--mode",
    type=click.Choice(["stamp", "commit"]),
    default="stamp",
    env="MODE",
    help="How groups are judged when a job does not say (jobs carry their own).",
)
@setting(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=4,
    env="CONCURRENCY",
)
@click.option(
    "--consumer", default=None, **from_env("CONSUMER"), help="Consumer name [default: host-pid]."
)
@setting(
    "--max-attempts",
    type=click.IntRange(1, 100),
    default=5,
    env="MAX_ATTEMPTS",
)
@setting(
    "--retry-delay",
    type=click.FloatRange(min=0),
    default=1.0,
    env="RETRY_DELAY",
    help="Seconds before the first retry of a failed job; each retry doubles it, less "
    "up to half at random (0: retry at once).",
)
@setting(
    "--retry-max-delay",
    type=click.FloatRange(min=0),
    default=60.0,
    env="RETRY_MAX_DELAY",
    help="The longest delay between two attempts of a job.",
)
@setting(
    "--sweep-interval",
    type=click.FloatRange(min=0),
    default=60.0,
    env="SWEEP_INTERVAL",
    help="Seconds between sweeps that collect read-atomic transactions' old versions "
    "of keys no longer written (0: never).",
)
@setting(
    "--min-idle",
    type=click.FloatRange(min=0.01),
    default=30.0,
    env="MIN_IDLE",
    help="Seconds before a job of a dead worker is taken over.",
)
@setting(
    "--grace",
    type=click.FloatRange(min=0),
    default=10.0,
    env="GRACE",
    help="Seconds the jobs in hand get to finish on SIGTERM before they are handed back.",
)
@click.option(
    "--burst",
    is_flag=True,
    **from_env("BURST"),
    help="Drain the queue and exit: stop once nothing is left to claim, in hand or "
    "waiting for a retry.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    **from_env("METRICS_PORT"),
    help="Serve /metrics (Prometheus) and /healthz on this port.",
)
@setting(
    "--metrics-host",
    default="127.0.0.1",
    env="METRICS_HOST",
    help="Address the metrics port binds; 0.0.0.0 lets a scraper outside the host "
    "or container reach it.",
)
@setting(
    "--health-interval",
    type=click.FloatRange(min=0.1),
    default=15.0,
    env="HEALTH_INTERVAL",
    help="Seconds between health lines in the log.",
)
@log_options("info")
def worker_command(
    where: Where,
    strategy: str,
    mode: str,
    concurrency: int,
    consumer: str | None,
    max_attempts: int,
    retry_delay: float,
    retry_max_delay: float,
    sweep_interval: float,
    min_idle: float,
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
    the strategy's shutdown and exits 0. Every option can also be set by the
    environment variable shown in its help.
    """
    setup_logging(log_level, log_format)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if strategy not in BUILTIN:
            resolve_strategy(strategy)  # import errors are usage errors, before connecting
        backoff = RetryBackoff(base=retry_delay, max_delay=retry_max_delay)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    st = where.connect()

    async def run() -> None:
        try:
            await _open(st, where)
            queue = RepairQueue(
                st.topology,
                name=where.stream,
                partitions=where.partitions,
                max_attempts=max_attempts,
                min_idle=min_idle,
            )
            async with open_strategy(strategy) as repair:
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
                )
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, worker.stop)
                server = (
                    await serve_metrics(worker, metrics_port, metrics_host)
                    if metrics_port is not None
                    else None
                )
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
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from None
    except StampedeError as exc:
        raise click.ClickException(str(exc)) from None
