"""`stampede slots --url`: the live slot analysis, run and printed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

import click
from rich.progress import Progress, TaskID
from rich.text import Text

from ..errors import ConfigurationError, SetupError, StampedeError
from ..keys import (
    SLOTS,
    HashPolicy,
    LiveSlots,
    ScanProgress,
    live_slots,
)
from ..keys._live import Method
from ..options import ConnectOptions
from ..topology import Cluster, SentinelShards, Shards
from ..typing import Topology
from ._common import console, show
from ._connection import check_where
from ._errors import fail, usage
from ._tables import plural, spans, table

METHODS: dict[str, Method] = {"auto": "auto", "scan": "scan", "slot-stats": "slot-stats"}

__all__ = ["LiveServers", "ScanDisplay", "check_live_options", "print_live", "run_live"]


@dataclass(frozen=True)
class LiveServers:
    """The servers `slots` walks: URLs (a cluster node with `cluster`) or Sentinel."""

    urls: Sequence[str] = ()
    cluster: bool = False
    sentinels: Sequence[str] = ()
    services: Sequence[str] = ()
    timeouts: ConnectOptions = field(default_factory=ConnectOptions)
    """--socket-timeout and --connect-timeout (the rest of it is not used)."""
    data_url: str | None = None

    def __bool__(self) -> bool:
        return bool(self.urls or self.sentinels or self.services or self.data_url)

    def topology(self, policy: HashPolicy | None) -> Topology:
        """The topology to walk; read only, so no shard identity record is written."""
        quiet_open = ConnectOptions(
            socket_timeout=self.timeouts.socket_timeout,
            connect_timeout=self.timeouts.connect_timeout,
            check_identity=False,
        )
        if self.cluster:
            return Cluster(list(self.urls), options=quiet_open)
        if self.sentinels:
            return SentinelShards(
                list(self.sentinels),
                list(self.services),
                policy=policy,
                options=quiet_open,
                data_url=self.data_url,
            )
        return Shards(list(self.urls), policy=policy, options=quiet_open)


def check_live_options(
    ctx: click.Context,
    keys: Sequence[str],
    stream: IO[bytes] | None,
    servers: LiveServers,
    policy: HashPolicy | None,
) -> None:
    check_where(
        servers.urls, servers.cluster, servers.sentinels, servers.services, servers.data_url
    )
    if keys or stream is not None:
        raise click.UsageError("give keys (arguments or --file) or --url, not both")
    if ctx.get_parameter_source("shards") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--shards is for key samples; with --url the servers are the shards")
    if servers.cluster and policy is not None:
        raise click.UsageError("--pattern applies to client-side shards, not a cluster")


def run_live(
    servers: LiveServers,
    policy: HashPolicy | None,
    *,
    top: int,
    method: str,
    match: bytes | None,
    count: int,
    quiet: bool,
) -> LiveSlots:
    async def run() -> LiveSlots:
        topology = servers.topology(policy)
        try:
            await topology.open()
            with ScanDisplay(enabled=not quiet) as display:
                return await live_slots(
                    topology,
                    top=top,
                    method=METHODS[method],
                    match=match,
                    count=count,
                    progress=display.update,
                )
        finally:
            await topology.aclose()

    try:
        return asyncio.run(run())
    except ConfigurationError as exc:  # e.g. a malformed URL: nothing was sent
        if isinstance(exc, SetupError):
            fail(exc)  # the servers refused what the flags describe
        raise usage(exc) from None
    except StampedeError as exc:
        fail(exc)


class ScanDisplay:
    """SCAN progress on stderr: a live bar per primary on a terminal, else a line each."""

    def __init__(self, *, enabled: bool) -> None:
        self._err = console(stderr=True)
        self._enabled = enabled
        self._live = enabled and self._err.is_terminal
        self._progress = Progress(console=self._err, transient=True) if self._live else None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> ScanDisplay:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, step: ScanProgress) -> None:
        if not self._enabled:
            return
        if self._progress is not None:
            task = self._tasks.get(step.shard)
            if task is None:
                task = self._tasks[step.shard] = self._progress.add_task(step.shard, total=None)
            self._progress.update(task, description=f"SCAN {step.shard}: {step.keys:,} keys")
            if step.done:
                self._progress.update(task, total=1, completed=1)
        elif step.done:
            print(
                f"scanned {step.shard}: {step.keys:,} keys "
                f"({step.shards_done} of {step.shards} primaries)",
                file=sys.stderr,
            )


def print_live(report: LiveSlots) -> None:
    out = console()
    dist = report.distribution
    total = dist.total
    how = (
        "CLUSTER SLOT-STATS"
        if report.method == "slot-stats"
        else f"SCAN ({report.scanned:,} keys returned)"
    )
    primaries = "primary" if dist.shards == 1 else "primaries"
    where = "of a cluster" if report.kind == "cluster" else "sharded by the client"
    out.print(
        f"{plural(total, 'key')} on {dist.shards} {primaries} {where} (counted with {how}), "
        f"{dist.occupied_slots:,} of {SLOTS} slots used",
        soft_wrap=True,
    )
    empty = ", ".join(report.shard_names[s] for s in dist.empty_shards) or "none"
    out.print(
        f"skew {dist.skew:.2f} (fullest {report.hottest_shard}: "
        f"{dist.shard_counts[dist.hottest_shard]:,} keys, mean {dist.mean:,.1f}); "
        f"empty: {empty}",
        soft_wrap=True,
    )
    for name, stray in report.misplaced.items():
        out.print(
            Text(f"{name} holds {stray:,} keys its slot map gives to another shard", "yellow"),
            soft_wrap=True,
        )
    shard_table = table("Shard", "Primary", "Slots", "Keys", "Share", title="Shards")
    ranges = dist.slot_map.ranges()
    for shard, count in enumerate(dist.shard_counts):
        shard_table.add_row(
            str(shard),
            report.shard_names[shard],
            spans(ranges[shard]),
            f"{count:,}",
            f"{count / total:.1%}" if total else "-",
        )
    out.print(shard_table)
    if not report.hottest:
        return
    columns = ["Slot", "Primary", "Keys", "Share", "Tags (keys)", "Example key"]
    if report.stats_enabled:
        columns += ["CPU µs", "Net in", "Net out"]
    hot_table = table(*columns, title="Hottest slots")
    for hot in report.hottest:
        tags = ", ".join(f"{{{show(tag)}}} {n:,}" for tag, n in hot.tags) or "-"
        row = [
            str(hot.slot),
            hot.shard,
            f"{hot.keys:,}",
            f"{hot.keys / total:.1%}" if total else "-",
            tags,
            show(hot.example) if hot.example is not None else "-",
        ]
        if report.stats_enabled:
            row += [
                f"{hot.stats.get(name, 0):,}"
                for name in ("cpu-usec", "network-bytes-in", "network-bytes-out")
            ]
        hot_table.add_row(*(Text(cell) for cell in row))
    out.print(hot_table)
