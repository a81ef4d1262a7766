"""Key design commands: `stampede keyslot`, `stampede lint`, `stampede slots`.

They read keys from the command line or a file (one key per line, `-` for stdin)
and never connect to Redis, except `stampede slots --url`, which walks live
servers (`stampede.keys.live_slots`). Keys on the command line are the bytes the shell
passed; keys from files are read as bytes, so non-UTF-8 keys work, and are shown
with undecodable bytes backslash-escaped.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import IO

import click
from click.core import ParameterSource
from rich.text import Text

from ..errors import ConfigurationError
from ..keys import (
    RULES,
    SLOTS,
    Distribution,
    Finding,
    HashPolicy,
    SlotMap,
    analyze,
    hashed_part,
    keyslot,
    lint,
)
from ..options import ConnectOptions
from ._common import (
    F,
    Spec,
    console,
    echo_json,
    input_keys,
    keys_from_args,
    options,
    pattern_option,
    policy_from,
    show,
)
from ._connection import sentinel_options
from ._live import LiveServers, check_live_options, print_live, run_live
from ._output import out
from ._params import FiniteRange, KeyFile, not_empty
from ._tables import plural, spans, table

_DEFAULTS = ConnectOptions()
"""The library's connection defaults, as the other commands' flags take them."""

__all__ = ["keyslot_command", "lint_command", "slots_command"]

_file_option = click.option(
    "--file",
    "-f",
    "stream",
    type=KeyFile(),
    help="Read keys from this file, one per line ('-' for stdin).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead.")


def _keys_input(fn: F) -> F:
    """KEY arguments, and --file for more."""
    return click.argument("keys", nargs=-1, metavar="[KEY]...")(_file_option(fn))


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
        out(f"{show(raw):<{key_width}}  {where}  hashed={show(part)}")


_LINT_OPTIONS: dict[str | tuple[str, ...], Spec] = {
    ("--ignore", "ignored"): (
        None,
        None,
        "Skip a rule (repeatable), e.g. --ignore SK007.",
        {"multiple": True, "metavar": "CODE", "show_default": False},
    ),
    "--limit": (
        click.IntRange(0),
        50,
        "Show at most this many findings in the table (0: all); --json has all.",
    ),
}


@click.command("lint")
@_keys_input
@options(_LINT_OPTIONS)
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
    grid = table("Code", "Name", "Why it matters", "Fix", title="stampede lint rules")
    for rule in RULES.values():
        grid.add_row(rule.code, rule.name, Text(rule.reason), Text(rule.fix))
    console().print(grid)


def _print_findings(findings: Sequence[Finding], total: int, *, limit: int) -> None:
    out = console()
    if not findings:
        out.print(f"{plural(total, 'key')} checked: no findings", soft_wrap=True)
        return
    shown = findings[:limit] if limit else findings
    grid = table("Code", "Key", "Problem", "Fix")
    for finding in shown:
        grid.add_row(
            finding.code, Text(show(finding.key)), Text(finding.message), Text(finding.fix)
        )
    out.print(grid)
    if len(shown) < len(findings):
        out.print(
            f"... and {len(findings) - len(shown):,} more (--limit 0 or --json shows all)",
            soft_wrap=True,
        )
    by_code = Counter(f.code for f in findings)
    keys_hit = len({f.key for f in findings})
    summary = ", ".join(f"{code} x{count:,}" for code, count in sorted(by_code.items()))
    found = plural(len(findings), "finding")
    out.print(f"{found} in {keys_hit:,} of {plural(total, 'key')} ({summary})", soft_wrap=True)


_SLOTS_OPTIONS: dict[str | tuple[str, ...], Spec] = {
    ("--url", "urls"): (
        None,
        None,
        "Analyse live servers instead: SCAN every primary (repeat per primary of "
        "client-side shards; one node with --cluster).",
        {"multiple": True, "metavar": "URL", "show_default": False},
    ),
    "--cluster": (
        None,
        False,
        "With --url: the URL is a Redis Cluster node (its slot map).",
        {"is_flag": True, "show_default": False},
    ),
    ("--shards", "-n"): (
        click.IntRange(1, SLOTS),
        3,
        "Number of shards, slots split evenly (as redis-cli --cluster create); "
        "with --url the servers are the shards.",
    ),
    ("--top", "-k"): (click.IntRange(0), 10, "How many of the fullest slots to list."),
    "--method": (
        click.Choice(["auto", "scan", "slot-stats"]),
        "auto",
        "With --url: count keys with SCAN, or with CLUSTER SLOT-STATS (Valkey >= 8.0, "
        "Redis >= 8.2); auto uses SLOT-STATS where the cluster has it.",
    ),
    "--match": (
        None,
        None,
        "With --url: only keys matching this SCAN MATCH pattern.",
        {"metavar": "GLOB", "show_default": False, "callback": not_empty},
    ),
    ("--count", "scan_count"): (
        click.IntRange(1),
        1000,
        "With --url: the SCAN COUNT hint (keys per call).",
    ),
    "--socket-timeout": (
        FiniteRange(min=0.01),
        _DEFAULTS.socket_timeout,
        "With --url: seconds before a silent server counts as down.",
    ),
    "--connect-timeout": (
        FiniteRange(min=0.01),
        _DEFAULTS.connect_timeout,
        "With --url: seconds to connect to a server.",
    ),
}


@click.command("slots")
@_keys_input
@options(_SLOTS_OPTIONS)
@sentinel_options
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
    socket_timeout: float,
    connect_timeout: float,
    sentinels: Sequence[str],
    services: Sequence[str],
    data_url: str | None,
    patterns: Sequence[str],
    as_json: bool,
) -> None:
    """Show how keys spread over slots and shards: per-shard counts, skew, hottest slots.

    Keys come as arguments or from --file (one per line, '-' for stdin); shards are
    an even split. Or --url: every primary of live servers is walked with SCAN (or
    asked CLUSTER SLOT-STATS), keys are mapped with the cluster's real slot map,
    and the hottest slots are listed with the hash tags that fill them, e.g.
    `stampede slots --url redis://node:7000 --cluster` (or --sentinel URL and
    --service NAME for primaries Sentinel manages). Skew is the fullest
    shard's key count over the mean: 1.0 is even, N means one shard has them all.
    """
    policy: HashPolicy | None = policy_from(patterns)
    timeouts = ConnectOptions(socket_timeout=socket_timeout, connect_timeout=connect_timeout)
    servers = LiveServers(urls, cluster, sentinels, services, timeouts, data_url)
    if servers:
        check_live_options(ctx, keys, stream, servers, policy)
        report = run_live(
            servers,
            policy,
            top=top,
            method=method,
            match=None if match is None else os.fsencode(match),  # the shell's bytes
            count=scan_count,
            quiet=as_json,
        )
        if as_json:
            echo_json(report.to_dict())
        else:
            print_live(report)
        return
    live_only = ("cluster", "match", "method", "socket_timeout", "connect_timeout")
    if any(ctx.get_parameter_source(name) is not ParameterSource.DEFAULT for name in live_only):
        raise click.UsageError(
            "--cluster, --match, --method, --socket-timeout and --connect-timeout need "
            "--url (live servers)"
        )
    try:
        result = analyze(input_keys(keys, stream), shards=shards, policy=policy, top=top)
    except ConfigurationError as exc:  # pragma: no cover - options are validated by click
        raise click.UsageError(str(exc)) from None
    if as_json:
        echo_json(result.to_dict())
    else:
        _print_distribution(result)


def _print_distribution(result: Distribution) -> None:
    out = console()
    total = result.total
    empty = ", ".join(map(str, result.empty_shards)) or "none"
    out.print(
        f"{plural(total, 'key')} on {plural(result.shards, 'shard')}, "
        f"{result.tagged:,} hashed by a tag, {result.occupied_slots:,} of {SLOTS} slots used",
        soft_wrap=True,
    )
    out.print(
        f"skew {result.skew:.2f} (fullest shard {result.hottest_shard}: "
        f"{result.shard_counts[result.hottest_shard]:,} keys, mean {result.mean:,.1f}); "
        f"empty shards: {empty}",
        soft_wrap=True,
    )
    shard_table = table("Shard", "Slots", "Keys", "Share", title="Shards")
    ranges = result.slot_map.ranges()
    for shard, count in enumerate(result.shard_counts):
        slots = spans(ranges[shard])
        share = f"{count / total:.1%}" if total else "-"
        shard_table.add_row(str(shard), slots, f"{count:,}", share)
    out.print(shard_table)
    if result.hottest:
        hot_table = table("Slot", "Shard", "Keys", "Share", "Example key", title="Hottest slots")
        for hot in result.hottest:
            hot_table.add_row(
                str(hot.slot),
                str(hot.shard),
                f"{hot.count:,}",
                f"{hot.count / total:.1%}",
                Text(show(hot.example)),
            )
        out.print(hot_table)
