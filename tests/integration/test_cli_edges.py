"""The command line at its edges: output closed by its reader (`| head -1`), signals
while it loads or stops, and flags that make no sense."""

from __future__ import annotations

import asyncio
import os

import pytest

from stampede.testing import LocalPrimaries

from ..support import FAST, open_stampede, run_cli

GROUPS = r"(?P<group>user:\d+):.*"


async def _unstamped(primaries: LocalPrimaries, groups: int) -> None:
    """`groups` groups of one plain (unstamped) key each: torn, to `scan`."""
    async with open_stampede(primaries, "primaries", connection=FAST) as st:
        for n in range(groups):
            key = f"user:{n}:a".encode()
            await st.topology.execute(key, "SET", key, b"plain")


def _run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """Run the command with stdout a pipe whose reader has already gone (as when
    `head -1` has read its line): every write to it fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = run_cli(*args, stdout=write)
    finally:
        os.close(write)
    return result.returncode, result.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["scan", "--group-pattern", GROUPS],
        ["scan", "--group-pattern", GROUPS, "--json"],
        ["scan", "--group-pattern", r"(?P<group>order:\d+):.*"],  # none torn: else exit 0
        ["queue", "stats"],
        ["queue", "dead", "--json"],
        ["slots"],
        ["keyslot", "a", "b"],
        ["lint", "--rules"],
        ["lint", "user:1", "user:2"],  # findings: else exit 1
        ["--help"],
        ["scan", "--help"],
        ["--version"],
    ],
    ids=[
        "scan-torn",
        "scan-json",
        "scan-clean",
        "queue-stats",
        "queue-dead",
        "slots",
        "keyslot",
        "lint-rules",
        "lint-findings",
        "help",
        "scan-help",
        "version",
    ],
)
async def test_output_closed_by_its_reader_exits_141_quietly(
    stampede_primaries: LocalPrimaries, args: list[str]
) -> None:
    """`stampede scan ... | head -1` exited 1 when head closed the pipe: the status of
    "torn groups found", whatever the scan found. A closed output is 141 now (128 +
    SIGPIPE, as a shell reports it), with no traceback and no "Exception ignored"."""
    await _unstamped(stampede_primaries, 5)
    connecting = args[0] in ("scan", "queue", "slots") and "--help" not in args
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)] if connecting else []
    status, err = await asyncio.to_thread(_run_into_closed_pipe, *args, *urls)
    assert status == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "error" not in err.lower(), err
