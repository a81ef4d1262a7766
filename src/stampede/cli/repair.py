"""`stampede worker` and `stampede scan`: the repair worker and the live audit."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..client import Stampede, connect
from ..errors import StampedeError
from ..options import ConnectOptions
from ..repair.loading import load_strategy
from ..repair.queue import RepairQueue
from ..repair.worker import Worker, serve_metrics
from ..scan import ScanReport, compile_pattern, scan_groups
from ..verdict import Mode
from ._common import console, show

__all__ = ["scan_command", "worker_command"]


def _connect(urls: tuple[str, ...], cluster: bool, socket_timeout: float) -> Stampede:
    if not urls:
        raise click.UsageError("give at least one --url (several for independent primaries)")
    try:
        return connect(
            list(urls), cluster=cluster, connection=ConnectOptions(socket_timeout=socket_timeout)
        )
    except StampedeError as exc:
        raise click.UsageError(str(exc)) from None


connection_options = [
    click.option(
        "--url",
        "urls",
        multiple=True,
        metavar="URL",
        help="A Redis URL: one per primary, or one startup node with --cluster.",
    ),
    click.option("--cluster", is_flag=True, help="The URL is a Redis Cluster node."),
    click.option(
        "--socket-timeout",
        type=click.FloatRange(min=0.01),
        default=5.0,
        show_default=True,
        help="Seconds before a silent shard counts as down.",
    ),
    click.option(
        "--mode",
        type=click.Choice(["stamp", "commit"]),
        default="stamp",
        show_default=True,
        help="How groups are judged (jobs carry their own).",
    ),
    click.option(
        "--partitions",
        type=click.IntRange(1, 1024),
        default=None,
        help="Repair stream partitions [default: 1, or 8 on a cluster].",
    ),
]


def with_connection(fn: Any) -> Any:
    for option in reversed(connection_options):
        fn = option(fn)
    return fn


@click.command("worker")
@with_connection
@click.option(
    "--strategy",
    required=True,
    metavar="SPEC",
    help="'newest-wins' or 'module:factory' returning a RepairStrategy.",
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True)
@click.option("--consumer", default=None, help="Consumer name [default: host-pid].")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--min-idle",
    type=click.FloatRange(min=0.01),
    default=30.0,
    show_default=True,
    help="Seconds before a job of a dead worker is taken over.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus text on this port.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port binds; 0.0.0.0 lets a scraper outside the host "
    "or container reach it.",
)
@click.option(
    "--health-interval",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Seconds between health lines in the log.",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info")
def worker_command(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    mode: str,
    partitions: int | None,
    strategy: str,
    concurrency: int,
    consumer: str | None,
    max_attempts: int,
    min_idle: float,
    metrics_port: int | None,
    metrics_host: str,
    health_interval: float,
    log_level: str,
) -> None:
    """Drain the repair stream: re-read, repair, ack; dead-letter what keeps failing.

    SIGTERM or SIGINT stops taking jobs and lets the jobs in hand finish.
    """
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        repair = asyncio.run(load_strategy(strategy))
    except StampedeError as exc:
        raise click.UsageError(str(exc)) from None
    st = _connect(urls, cluster, socket_timeout)

    async def run() -> None:
        async with st:
            queue = RepairQueue(
                st.topology, partitions=partitions, max_attempts=max_attempts, min_idle=min_idle
            )
            worker = Worker(
                st.topology,
                queue,
                repair,
                concurrency=concurrency,
                consumer=consumer,
                mode=Mode(mode),
                versions=st.versions,
                health_interval=health_interval,
                block_ms=int(min(1.0, socket_timeout / 2) * 1000),
            )
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, worker.stop)
            server = (
                await serve_metrics(worker.stats, metrics_port, metrics_host)
                if metrics_port
                else None
            )
            try:
                await worker.run()
            finally:
                if server is not None:
                    server.close()

    asyncio.run(run())


@click.command("scan")
@with_connection
@click.option(
    "--pattern",
    required=True,
    metavar="REGEX",
    help=r"Regex over whole keys with a named group 'group', e.g. '(?P<group>user:\{\d+\}):.*'.",
)
@click.option("--match", default="*", show_default=True, help="SCAN MATCH glob to narrow the walk.")
@click.option(
    "--count",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="SCAN COUNT hint.",
)
@click.option("--enqueue", is_flag=True, help="Put every torn group on the repair stream.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def scan_command(
    urls: tuple[str, ...],
    cluster: bool,
    socket_timeout: float,
    mode: str,
    partitions: int | None,
    pattern: str,
    match: str,
    count: int,
    enqueue: bool,
    as_json: bool,
) -> None:
    """Walk every shard with SCAN and report the groups that stay torn (exit 1 if any)."""
    try:
        regex = compile_pattern(pattern)
    except StampedeError as exc:
        raise click.UsageError(str(exc)) from None
    st = _connect(urls, cluster, socket_timeout)

    async def run() -> tuple[ScanReport, int]:
        async with st:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}"),
                TimeElapsedColumn(),
                console=console(),
                transient=True,
                disable=as_json,
            ) as bar:
                scanned = bar.add_task("keys scanned", total=None)
                judged = bar.add_task("groups judged", total=None)

                def progress(phase: str, n: int) -> None:
                    bar.advance(scanned if phase == "scan" else judged, n)

                report = await scan_groups(
                    st.topology,
                    regex,
                    match=match,
                    mode=Mode(mode),
                    count=count,
                    progress=progress,
                )
            queued = 0
            if enqueue and report.torn:
                queue = RepairQueue(st.topology, partitions=partitions)
                for torn in report.torn:
                    job = await queue.enqueue(
                        torn.group,
                        list(torn.keys),
                        torn.seen,
                        torn.reason.value,
                        mode=torn.mode.value,
                    )
                    queued += job is not None
            return report, queued

    try:
        report, queued = asyncio.run(run())
    except StampedeError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(_as_json(report, queued), indent=2))
    else:
        _print(report, queued, enqueue)
    sys.exit(1 if report.torn else 0)


def _as_json(report: ScanReport, queued: int) -> dict[str, Any]:
    return {
        "keys_scanned": report.keys_scanned,
        "groups": report.groups,
        "consistent": report.consistent,
        "not_found": report.not_found,
        "ignored_keys": report.ignored_keys,
        "seconds": round(report.seconds, 3),
        "enqueued": queued,
        "torn": [
            {"group": show(t.group), "reason": t.reason.value, "seen": t.seen} for t in report.torn
        ],
    }


def _print(report: ScanReport, queued: int, enqueue: bool) -> None:
    out = console()
    if report.torn:
        table = Table(title=f"{len(report.torn)} torn group(s)")
        table.add_column("group")
        table.add_column("reason")
        table.add_column("seen (key = version:token)")
        for torn in report.torn[:1000]:
            seen = ", ".join(f"{k}={v}" for k, v in torn.seen.items())
            table.add_row(show(torn.group), torn.reason.value, seen)
        out.print(table)
    rate = report.keys_scanned / report.seconds if report.seconds else 0.0
    out.print(
        f"{report.keys_scanned} keys in {report.groups} groups scanned in "
        f"{report.seconds:.2f}s ({rate:,.0f} keys/s): {report.consistent} consistent, "
        f"{len(report.torn)} torn, {report.ignored_keys} keys outside the pattern"
    )
    if enqueue:
        out.print(f"{queued} repair job(s) enqueued ({len(report.torn) - queued} already pending)")
