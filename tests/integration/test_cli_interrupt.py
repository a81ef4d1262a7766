"""Ctrl-C (SIGINT) in the middle of a command: one line and exit status 130, never a
traceback, and never an exit status that means a finding (1: torn groups, broken rules)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from stampede.testing import LocalPrimaries, RedisProxy
from stampede.testing.proxy import Match

from ..support import eventually, start_cli

STALL = 600.0  # seconds a stalled reply is held: far longer than the test waits


def _named(*names: bytes) -> Match:
    return lambda cmd: cmd[0].upper() in names


@pytest.mark.parametrize(
    ("args", "stalled"),
    [
        (["scan", "--group-pattern", r"(?P<group>user:\d+):.*"], (b"SCAN",)),
        (["slots"], (b"SCAN",)),
        (["queue", "stats"], (b"XINFO", b"XLEN", b"XPENDING", b"ZCARD")),
    ],
    ids=["scan", "slots", "queue-stats"],
)
async def test_ctrl_c_mid_command_exits_130_without_traceback(
    stampede_primaries: LocalPrimaries, args: list[str], stalled: tuple[bytes, ...]
) -> None:
    """The command waits on a reply the server holds back; SIGINT then ends it with
    `stampede <command>: interrupted` and status 130."""
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        proxy.delay_reply(_named(*stalled), STALL, times=None)
        # The one node is shard 0 of the fixture's three: skip the identity check.
        more = [] if args[0] == "slots" else ["--socket-timeout", str(STALL), "--no-check-identity"]
        proc = await start_cli(*args, "--url", proxy.url, *more)

        async def waiting() -> bool:
            return proxy.count(_named(*stalled)) > 0

        await eventually(waiting, within=60)
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = err.decode()
    assert proc.returncode == 130, text
    assert f"stampede {args[0]}: interrupted" in text
    assert "Traceback" not in text and "Aborted!" not in text
