"""Audit live data for torn groups: SCAN every shard, group keys, judge each group.

```python
report = await scan_groups(st.topology, r"(?P<group>user:\\{\\d+\\}):.*", match="user:*")
for torn in report.torn:
    print(torn.group, torn.reason)
```

Keys are walked with SCAN (never KEYS) on every primary, grouped by a regex
with a named group `group`, then read back in batches (one round trip per shard
per batch) and judged. A group that looks in flight is read again after a short
pause, so only groups that stay torn are reported. In commit mode a group's
record adds the keys it names, so a deleted key shows up as missing; in stamp mode
scan can only see the keys that exist.

The mode is detected by default (`mode=None`): when any group the pattern finds
has a commit record (`<group>:stampede:commit`), every group is judged in commit
mode, so a group whose record was lost or is stale reads as torn instead of
clean; otherwise stamp mode. `mode=Mode.STAMP` over groups that have records is
refused (`ConfigurationError`): judged that way their records would be ignored.
Scan one entity type at a time (its own `match` and pattern) if types differ in mode.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _pipeline as pipeline
from .errors import ConfigurationError, ShardTimeout
from .typing import Topology
from .verdict import Mode, Observation, Reason, Status, judge
from .wire import COMMIT_SUFFIX, commit_key, decode_commit, is_reserved

__all__ = ["ScanReport", "TornGroup", "compile_pattern", "scan_groups"]


Progress = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class TornGroup:
    group: bytes
    keys: tuple[bytes, ...]
    reason: Reason
    seen: dict[str, str | None]
    mode: Mode


@dataclass
class ScanReport:
    """What a scan found. `mode` is the mode the groups were judged in, and
    `committed` how many groups had a commit record."""

    keys_scanned: int = 0
    groups: int = 0
    consistent: int = 0
    not_found: int = 0
    torn: list[TornGroup] = field(default_factory=list)
    ignored_keys: int = 0
    seconds: float = 0.0
    mode: Mode = Mode.STAMP
    committed: int = 0
    misrouted: list[bytes] = field(default_factory=list)
    """Keys found on a server they do not route to (another URL order or slot map
    wrote them, or another program): reads never look for them there."""


def compile_pattern(pattern: str | bytes) -> re.Pattern[bytes]:
    """A bytes regex with a named group `group`; `ConfigurationError` if not."""
    try:
        raw = pattern.encode() if isinstance(pattern, str) else pattern
        compiled = re.compile(raw)
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"group pattern {pattern!r} is not valid UTF-8 text; write it in UTF-8 (use "
            r"\xNN escapes for other bytes)"
        ) from None
    except (re.error, OverflowError, RecursionError) as exc:
        raise ConfigurationError(f"bad group pattern {pattern!r}: {exc}") from None
    if "group" not in compiled.groupindex:
        raise ConfigurationError(
            f"group pattern {pattern!r} has no named group 'group'; write e.g. "
            r"'(?P<group>user:\{\d+\}):.*'"
        )
    return compiled


_PAGE_TRIES = 3
"""How often a SCAN page is asked before its shard's `ShardTimeout` ends the scan: a
page is read-only and asked again with the same cursor, so a moment of load does
not end a long scan (the cursor's server is checked as always)."""


async def _scan_shard(
    topology: Any,
    shard: str,
    match: str | bytes,
    count: int,
    on_keys: Callable[[list[bytes]], None],
    misrouted: list[bytes],
) -> None:
    cursor: Any = 0
    while True:
        for attempt in range(_PAGE_TRIES):  # a page that timed out is asked again, same cursor
            try:
                cursor, keys = await topology.execute_on(
                    shard, "SCAN", cursor, "MATCH", match, "COUNT", count
                )
                break
            except ShardTimeout:
                if attempt == _PAGE_TRIES - 1:
                    raise
                await asyncio.sleep(0.1 * 2**attempt)
        found = list(keys)
        misrouted += topology.misrouted(shard, found)
        on_keys(found)
        if int(cursor) == 0:
            return


async def scan_groups(
    topology: Topology,
    pattern: str | bytes | re.Pattern[bytes],
    *,
    match: str | bytes = "*",
    mode: Mode | None = None,
    count: int = 1000,
    batch: int = 500,
    recheck_delay: float = 0.2,
    progress: Progress | None = None,
) -> ScanReport:
    """Walk every shard and judge every group the pattern finds.

    `mode=None` detects the mode from the commit records (see the module doc).
    """
    regex = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern)
    loop = asyncio.get_running_loop()
    started = loop.time()
    report = ScanReport()
    groups: dict[bytes, set[bytes]] = {}
    records: set[bytes] = set()

    def on_keys(keys: list[bytes]) -> None:
        report.keys_scanned += len(keys)
        for key in keys:
            if is_reserved(key):  # stampede's own keys: records, counters, kept versions
                if key.endswith(COMMIT_SUFFIX):
                    records.add(key[: -len(COMMIT_SUFFIX)])
                continue
            found = regex.fullmatch(key)
            if found is None or not found.group("group"):
                report.ignored_keys += 1
                continue
            groups.setdefault(found.group("group"), set()).add(key)
        if progress is not None:
            progress("scan", len(keys))

    await asyncio.gather(
        *(
            _scan_shard(topology, s, match, count, on_keys, report.misrouted)
            for s in topology.shard_names
        )
    )
    report.groups = len(groups)
    names = sorted(groups)
    committed = sorted(g for g in records if g in groups)
    report.committed = len(committed)
    mode = _effective_mode(mode, committed, len(names))
    report.mode = mode
    suspects: list[bytes] = []
    for start in range(0, len(names), batch):
        chunk = names[start : start + batch]
        suspects += _tally(report, await _observe_many(topology, chunk, groups, mode), final=False)
        if progress is not None:
            progress("judge", len(chunk))
    for start in range(0, len(suspects), batch):
        if start == 0:
            await asyncio.sleep(recheck_delay)  # let writes in flight land
        chunk = suspects[start : start + batch]
        _tally(report, await _observe_many(topology, chunk, groups, mode), final=True)
    report.seconds = loop.time() - started
    return report


def _effective_mode(mode: Mode | None, committed: Sequence[bytes], groups: int) -> Mode:
    if mode is None:
        return Mode.COMMIT if committed else Mode.STAMP
    if mode is Mode.STAMP and committed:
        example = committed[0].decode("utf-8", "backslashreplace")
        raise ConfigurationError(
            f"{len(committed)} of the {groups} groups have commit records (e.g. {example!r}): "
            "they are written in commit mode, and judged in stamp mode a lost or stale "
            "record would not be seen. Scan in commit mode (or let scan detect the mode); "
            "if entity types differ in mode, scan each with its own match and pattern"
        )
    return mode


def _tally(report: ScanReport, observations: list[Observation], *, final: bool) -> list[bytes]:
    """Count whole groups; return the suspects (or, when `final`, record them as torn)."""
    suspects = []
    for obs in observations:
        verdict = judge(obs)
        if verdict.status is Status.CONSISTENT:
            report.consistent += 1
        elif verdict.status is Status.NOT_FOUND:
            report.not_found += 1
        elif final:
            reason = verdict.reason or Reason.TORN
            report.torn.append(TornGroup(obs.group, obs.keys, reason, obs.seen(), obs.mode))
        else:
            suspects.append(obs.group)
    return suspects


async def _observe_many(
    topology: Topology, names: Sequence[bytes], groups: dict[bytes, set[bytes]], mode: Mode
) -> list[Observation]:
    """One fetch (a round trip per shard) for many groups; in commit mode with records,
    whose key lists first complete what the scan found of each group."""
    if mode is Mode.COMMIT:
        records = await topology.fetch([commit_key(g) for g in names])
        for name, record_raw in zip(names, records, strict=True):
            listed = decode_commit(record_raw, name)
            if listed is not None:
                groups[name] |= listed.keys
    return await pipeline.observe_many(topology, [(g, sorted(groups[g])) for g in names], mode)
