"""Key design commands: `stampede keyslot`, `stampede lint`, `stampede slots`.

They read keys from the command line or a file (one key per line, `-` for stdin)
and never connect to Redis, except `stampede slots --url`, which walks live
servers (`stampede.keys.live_slots`). Keys on the command line are the bytes the shell
passed; keys from files are read as bytes, so non-UTF-8 keys work, and are shown
with undecodable bytes backslash-escaped.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

import click
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from ..errors import ConfigurationError, StampedeError
from ..keys import (
    RULES,
    SLOTS,
    Distribution,
    Finding,
    HashPolicy,
    LiveSlots,
    ScanProgress,
    SlotMap,
    analyze,
    hashed_part,
    keyslot,
    lint,
    live_slots,
)
from ..keys._live import Method
from ..topology.base import Topology
from ..topology.cluster import Cluster
from ..topology.shards import Shards
from ._common import (
    console,
    echo_json,
    input_keys,
    keys_from_args,
    pattern_option,
    policy_from,
    show,
)

__all__ = ["keyslot_command", "lint_command", "slots_command"]

_file_option = click.option(
    "--file",
    "-f",
    "stream",
    type=click.File("rb", lazy=False),
    help="Read keys from this file, one per line ('-' for stdin).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")


@click.command("keyslot")
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@click.option(
    "--shards",
    "-n",
    type=click.IntRange(1, SLOTS),
    help="Also show the shard, for N shards split evenly (as redis-cli --cluster create).",
)
@pattern_option
@_json_option
def keyslot_command(
    keys: Sequence[str], shards: int | None, patterns: Sequence[str], as_json: bool
) -> None:
    """Print the hash slot of each KEY, the part of it that is hashed, and its shard.

    \b
    $ stampede keyslot 'user:{42}:cart' 123456789 --shards 3
    user:{42}:cart  slot=8000   shard=1  hashed=42
    123456789       slot=12739  shard=2  hashed=123456789
    """
    policy = policy_from(patterns)
    slot_map = SlotMap.even(shards) if shards is not None else None
    rows = []
    for raw in keys_from_args(keys):
        slot = keyslot(raw) if policy is None else policy.keyslot(raw)
        part = hashed_part(raw) if policy is None else policy.hashed_part(raw)
        shard = slot_map.shard_of(slot) if slot_map is not None else None
        rows.append((raw, slot, part, shard))
    if as_json:
        echo_json(
            [
                {"key": show(raw), "slot": slot, "hashed": show(part)}
                | ({} if shard is None else {"shard": shard})
                for raw, slot, part, shard in rows
            ]
        )
        return
    key_width = max(len(show(raw)) for raw, *_ in rows)
    slot_width = max(len(str(slot)) for _, slot, *_ in rows)
    for raw, slot, part, shard in rows:
        where = f"slot={slot:<{slot_width}}"
        if shard is not None:
            where += f"  shard={shard:<{len(str(shards))}}"
        click.echo(f"{show(raw):<{key_width}}  {where}  hashed={show(part)}")


@click.command("lint")
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@_file_option
@click.option(
    "--ignore",
    "ignored",
    multiple=True,
    metavar="CODE",
    help="Skip a rule (repeatable), e.g. --ignore SK007.",
)
@click.option(
    "--limit",
    type=click.IntRange(0),
    default=50,
    show_default=True,
    help="Show at most this many findings in the table (0: all); --json has all.",
)
@pattern_option
@click.option("--rules", "list_rules", is_flag=True, help="List the rules and exit.")
@_json_option
def lint_command(
    keys: Sequence[str],
    stream: IO[bytes] | None,
    ignored: Sequence[str],
    limit: int,
    patterns: Sequence[str],
    list_rules: bool,
    as_json: bool,
) -> None:
    """Check key names for hash tag mistakes; exit 1 if any rule is broken.

    Keys come as arguments or from --file (one per line, '-' for stdin). Each
    finding names a rule (SK001...; see --rules), the key, the problem and the fix.
    """
    if list_rules:
        _print_rules(as_json)
        return
    policy = policy_from(patterns)
    codes = [code.upper() for code in ignored]
    unknown = sorted(set(codes) - RULES.keys())
    if unknown:
        raise click.BadParameter(
            f"unknown rule {', '.join(unknown)}; see 'stampede lint --rules'",
            param_hint="'--ignore'",
        )
    counted = _Counted(input_keys(keys, stream))
    findings = lint(counted, policy=policy, ignore=codes)
    if as_json:
        echo_json({"keys": counted.count, "findings": [f.to_dict() for f in findings]})
    else:
        _print_findings(findings, counted.count, limit=limit)
    if findings:
        click.get_current_context().exit(1)


class _Counted:
    """An iterable of keys that counts the keys that passed through it."""

    def __init__(self, keys: Iterable[bytes]) -> None:
        self._keys = keys
        self.count = 0

    def __iter__(self) -> Iterator[bytes]:
        for key in self._keys:
            self.count += 1
            yield key


def _print_rules(as_json: bool) -> None:
    if as_json:
        echo_json(
            [
                {"code": r.code, "name": r.name, "reason": r.reason, "fix": r.fix}
                for r in RULES.values()
            ]
        )
        return
    table = _table("Code", "Name", "Why it matters", "Fix", title="stampede lint rules")
    for rule in RULES.values():
        table.add_row(rule.code, rule.name, Text(rule.reason), Text(rule.fix))
    console().print(table)


def _print_findings(findings: Sequence[Finding], total: int, *, limit: int) -> None:
    out = console()
    if not findings:
        out.print(f"{_plural(total, 'key')} checked: no findings", soft_wrap=True)
        return
    shown = findings[:limit] if limit else findings
    table = _table("Code", "Key", "Problem", "Fix")
    for finding in shown:
        table.add_row(
            finding.code, Text(show(finding.key)), Text(finding.message), Text(finding.fix)
        )
    out.print(table)
    if len(shown) < len(findings):
        out.print(
            f"... and {len(findings) - len(shown):,} more (--limit 0 or --json shows all)",
            soft_wrap=True,
        )
    by_code = Counter(f.code for f in findings)
    keys_hit = len({f.key for f in findings})
    summary = ", ".join(f"{code} x{count:,}" for code, count in sorted(by_code.items()))
    found = _plural(len(findings), "finding")
    out.print(f"{found} in {keys_hit:,} of {_plural(total, 'key')} ({summary})", soft_wrap=True)


@click.command("slots")
@click.argument("keys", nargs=-1, metavar="[KEY]...")
@_file_option
@click.option(
    "--url",
    "urls",
    multiple=True,
    metavar="URL",
    help="Analyse live servers instead: SCAN every primary (repeat per primary of "
    "client-side shards; one node with --cluster).",
)
@click.option(
    "--cluster", is_flag=True, help="With --url: the URL is a Redis Cluster node (its slot map)."
)
@click.option(
    "--shards",
    "-n",
    type=click.IntRange(1, SLOTS),
    default=3,
    show_default=True,
    help="Number of shards, slots split evenly (as redis-cli --cluster create); "
    "with --url the servers are the shards.",
)
@click.option(
    "--top",
    "-k",
    type=click.IntRange(0),
    default=10,
    show_default=True,
    help="How many of the fullest slots to list.",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "scan", "slot-stats"]),
    default="auto",
    show_default=True,
    help="With --url: count keys with SCAN, or with CLUSTER SLOT-STATS (Valkey >= 8.0, "
    "Redis >= 8.2); auto uses SLOT-STATS where the cluster has it.",
)
@click.option(
    "--match", metavar="GLOB", help="With --url: only keys matching this SCAN MATCH pattern."
)
@click.option(
    "--count",
    "scan_count",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="With --url: the SCAN COUNT hint (keys per call).",
)
@pattern_option
@_json_option
@click.pass_context
def slots_command(
    ctx: click.Context,
    keys: Sequence[str],
    stream: IO[bytes] | None,
    urls: Sequence[str],
    cluster: bool,
    shards: int,
    top: int,
    method: str,
    match: str | None,
    scan_count: int,
    patterns: Sequence[str],
    as_json: bool,
) -> None:
    """Show how keys spread over slots and shards: per-shard counts, skew, hottest slots.

    Keys come as arguments or from --file (one per line, '-' for stdin); shards are
    an even split. Or --url: every primary of live servers is walked with SCAN (or
    asked CLUSTER SLOT-STATS), keys are mapped with the cluster's real slot map,
    and the hottest slots are listed with the hash tags that fill them, e.g.
    `stampede slots --url redis://node:7000 --cluster`. Skew is the fullest
    shard's key count over the mean: 1.0 is even, N means one shard has them all.
    """
    policy: HashPolicy | None = policy_from(patterns)
    if urls:
        _check_live_options(ctx, keys, stream, urls, cluster, policy)
        report = _run_live(
            urls,
            cluster,
            policy,
            top=top,
            method=method,
            match=match,
            count=scan_count,
            quiet=as_json,
        )
        if as_json:
            echo_json(report.to_dict())
        else:
            _print_live(report)
        return
    if cluster or match is not None or method != "auto":
        raise click.UsageError("--cluster, --match and --method need --url (live servers)")
    try:
        result = analyze(input_keys(keys, stream), shards=shards, policy=policy, top=top)
    except ConfigurationError as exc:  # pragma: no cover - options are validated by click
        raise click.UsageError(str(exc)) from None
    if as_json:
        echo_json(result.to_dict())
    else:
        _print_distribution(result)


def _check_live_options(
    ctx: click.Context,
    keys: Sequence[str],
    stream: IO[bytes] | None,
    urls: Sequence[str],
    cluster: bool,
    policy: HashPolicy | None,
) -> None:
    if keys or stream is not None:
        raise click.UsageError("give keys (arguments or --file) or --url, not both")
    if ctx.get_parameter_source("shards") is not click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--shards is for key samples; with --url the servers are the shards")
    if cluster and len(urls) != 1:
        raise click.UsageError("--cluster takes one --url (a node); the others are discovered")
    if cluster and policy is not None:
        raise click.UsageError("--pattern applies to client-side shards, not a cluster")


def _run_live(
    urls: Sequence[str],
    cluster: bool,
    policy: HashPolicy | None,
    *,
    top: int,
    method: str,
    match: str | None,
    count: int,
    quiet: bool,
) -> LiveSlots:
    async def run() -> LiveSlots:
        topology: Topology
        if cluster:
            topology = Cluster.from_url(urls[0])
        else:
            topology = Shards.from_urls(list(urls), policy=policy)
        try:
            if isinstance(topology, Cluster):
                await topology.open()
            with _ScanDisplay(enabled=not quiet) as display:
                return await live_slots(
                    topology,
                    top=top,
                    method=_METHOD[method],
                    match=match,
                    count=count,
                    progress=display.update,
                )
        finally:
            await topology.aclose()

    try:
        return asyncio.run(run())
    except StampedeError as exc:
        raise click.ClickException(str(exc)) from None


_METHOD: dict[str, Method] = {"auto": "auto", "scan": "scan", "slot-stats": "slot-stats"}


class _ScanDisplay:
    """SCAN progress on stderr: a live bar per primary on a terminal, else a line each."""

    def __init__(self, *, enabled: bool) -> None:
        self._err = Console(stderr=True, highlight=False)
        self._enabled = enabled
        self._live = enabled and self._err.is_terminal
        self._progress = Progress(console=self._err, transient=True) if self._live else None
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> _ScanDisplay:
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


def _print_live(report: LiveSlots) -> None:
    out = console()
    dist = report.distribution
    total = dist.total
    how = (
        "CLUSTER SLOT-STATS"
        if report.method == "slot-stats"
        else f"SCAN ({report.scanned:,} keys returned)"
    )
    out.print(
        f"{_plural(total, 'key')} on {dist.shards} {'primary' if dist.shards == 1 else 'primaries'}"
        f" of a {report.kind} (counted with {how}), "
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
            f"[yellow]{name} holds {stray:,} keys its slot map gives to another shard",
            soft_wrap=True,
        )
    shard_table = _table("Shard", "Primary", "Slots", "Keys", "Share", title="Shards")
    ranges = dist.slot_map.ranges()
    for shard, count in enumerate(dist.shard_counts):
        shard_table.add_row(
            str(shard),
            report.shard_names[shard],
            _spans(ranges[shard]),
            f"{count:,}",
            f"{count / total:.1%}" if total else "-",
        )
    out.print(shard_table)
    if not report.hottest:
        return
    columns = ["Slot", "Primary", "Keys", "Share", "Tags (keys)", "Example key"]
    if report.stats_enabled:
        columns += ["CPU µs", "Net in", "Net out"]
    hot_table = _table(*columns, title="Hottest slots")
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


def _spans(spans: Sequence[tuple[int, int]]) -> str:
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:3])
    if len(spans) > 3:
        text += f", ... ({len(spans)} ranges)"
    return text


def _print_distribution(result: Distribution) -> None:
    out = console()
    total = result.total
    empty = ", ".join(map(str, result.empty_shards)) or "none"
    out.print(
        f"{_plural(total, 'key')} on {_plural(result.shards, 'shard')}, "
        f"{result.tagged:,} hashed by a tag, {result.occupied_slots:,} of {SLOTS} slots used",
        soft_wrap=True,
    )
    out.print(
        f"skew {result.skew:.2f} (fullest shard {result.hottest_shard}: "
        f"{result.shard_counts[result.hottest_shard]:,} keys, mean {result.mean:,.1f}); "
        f"empty shards: {empty}",
        soft_wrap=True,
    )
    shard_table = _table("Shard", "Slots", "Keys", "Share", title="Shards")
    ranges = result.slot_map.ranges()
    for shard, count in enumerate(result.shard_counts):
        slots = _spans(ranges[shard])
        share = f"{count / total:.1%}" if total else "-"
        shard_table.add_row(str(shard), slots, f"{count:,}", share)
    out.print(shard_table)
    if result.hottest:
        hot_table = _table("Slot", "Shard", "Keys", "Share", "Example key", title="Hottest slots")
        for hot in result.hottest:
            hot_table.add_row(
                str(hot.slot),
                str(hot.shard),
                f"{hot.count:,}",
                f"{hot.count / total:.1%}",
                Text(show(hot.example)),
            )
        out.print(hot_table)


def _table(*columns: str, title: str | None = None) -> Table:
    """A table whose long cells fold onto more lines rather than being cut off."""
    table = Table(title=title)
    for column in columns:
        numeric = column in ("Keys", "Share", "Slot", "Shard", "CPU µs", "Net in", "Net out")
        table.add_column(column, overflow="fold", justify="right" if numeric else "left")
    return table


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
