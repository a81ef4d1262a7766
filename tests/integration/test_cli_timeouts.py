"""A server that stops answering mid-command: the command's error advises the flag it
has (`--socket-timeout`), never a Python option nor a flag it lacks."""

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
