"""Hostile input to the connecting commands: a server that stops answering mid-command
(the error advises the flag the command has, `--socket-timeout`, never a Python
option nor a flag it lacks), and empty values that are quoting mistakes."""

from __future__ import annotations

import asyncio

import pytest

from stampede.testing import LocalPrimaries, RedisProxy

from ..support import run_cli

STALL = 600.0  # seconds the proxy holds a SCAN reply: far past any socket timeout here


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["slots"], 1),
        (["scan", "--group-pattern", r"(?P<group>user:\d+):.*", "--no-check-identity"], 3),
    ],
    ids=["slots", "scan"],
)
async def test_a_stalled_scan_advises_the_socket_timeout_flag(
    stampede_primaries: LocalPrimaries, args: list[str], status: int
) -> None:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        proxy.delay_reply(lambda cmd: cmd[0].upper() == b"SCAN", STALL, times=None)
        result = await asyncio.to_thread(
            run_cli, *args, "--url", proxy.url, "--socket-timeout", "0.5", timeout=120
        )
    err = result.stderr.decode()
    assert result.returncode == status, err
    assert "did not answer in time" in err and "raise --socket-timeout" in err, err
    assert "socket_timeout" not in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "args",
    [
        ["scan", "--group-pattern", r"(?P<group>user:\d+):.*", "--match", ""],
        ["scan", "--group-pattern", r"(?P<group>user:\d+):.*", "--enqueue", "--stream", ""],
        ["slots", "--match", ""],
        ["queue", "stats", "--stream", ""],
        ["worker", "--strategy", "newest-wins", "--burst", "--stream", ""],
    ],
    ids=["scan-match", "scan-stream", "slots-match", "queue-stream", "worker-stream"],
)
async def test_an_empty_match_or_stream_is_a_usage_error(
    stampede_primaries: LocalPrimaries, args: list[str]
) -> None:
    """`--match ''` walked every key and matched none (scan exit 0, "0 torn": a cron job
    that always passes); `--stream ''` failed after the work, with exit 1 or 3. Both
    are usage errors now, named, before anything is sent."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    result = await asyncio.to_thread(run_cli, *args, *urls, timeout=120)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "is empty" in err and ("'--match'" in err or "'--stream'" in err), err
