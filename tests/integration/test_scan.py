"""`scan` finds exactly the torn groups in a large keyspace; `--enqueue` + a worker fix them."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from typing import Any

import pytest

import stampede
from stampede import ConfigurationError, ConnectOptions, Envelope, HybridClock, Mode, Stampede
from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker
from stampede.scan import scan_groups
from stampede.testing import RedisProxy
from stampede.wire import new_token

from ..support import eventually, open_stampede, run_cli, start_cli, write_newer

GROUPS = 10_000
PATTERN = r"(?P<group>acct:\d+):(?:a|b|c)"


def keys_of(i: int) -> list[str]:
    return [f"acct:{i}:a", f"acct:{i}:b", f"acct:{i}:c"]


async def populate(st: Stampede, mode: Mode, groups: int = GROUPS, torn_n: int = 40) -> set[bytes]:
    """Write `groups` groups, then tear a random few in several ways; return the torn names."""
    # Bulk load: each chunk of 500 groups is one guarded write (one stamp per chunk).
    for start in range(0, groups, 500):
        chunk = range(start, min(start + 500, groups))
        version, token = HybridClock().now(), new_token()
        keys = [k.encode() for i in chunk for k in keys_of(i)]
        values = [Envelope(version, token, b"p").encode()] * len(keys)
        if mode is Mode.COMMIT:
            for i in chunk:
                names = keys_of(i)
                keys.append(f"acct:{i}:stampede:commit".encode())
                values.append(Envelope(version, token, json.dumps(names).encode()).encode())
        out = await st.topology.write_guarded(keys, values, version=version, token=token)
        assert out.ok
    rng = random.Random(42)
    torn: set[bytes] = set()
    for n, i in enumerate(rng.sample(range(groups), torn_n)):
        names = keys_of(i)
        first = names[0].encode()
        if n % 3 == 0:  # a newer write that reached one key only
            await write_newer(st, [first], b"newer")
        elif n % 3 == 1:  # a plain value from another program
            await st.topology.execute(first, "SET", first, b"legacy")
        elif mode is Mode.COMMIT:  # data whole, record lost
            record = f"acct:{i}:stampede:commit".encode()
            await st.topology.execute(record, "DEL", record)
        else:  # a newer write that reached two keys
            await write_newer(st, [k.encode() for k in names[:2]], b"newer")
        torn.add(f"acct:{i}".encode())
    return torn


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_scan_finds_exactly_the_torn_groups(
    topology_env: tuple[str, Any], mode: Mode
) -> None:
    """Over 10,000 groups scan reports exactly the planted torn ones; a worker fixes them."""
    kind, env = topology_env
    async with open_stampede(env, kind) as st:
        torn = await populate(st, mode)
        report = await scan_groups(st.topology, PATTERN, match="acct:*", mode=mode)
        assert report.groups == GROUPS
        assert {t.group for t in report.torn} == torn
        assert report.consistent == GROUPS - len(torn)

        queue = RepairQueue(st.topology)
        for t in report.torn:
            await queue.enqueue(t.group, list(t.keys), t.seen, t.reason.value, mode=t.mode.value)
        worker = Worker(st.topology, queue, NewestWins(), concurrency=16, mode=mode)
        runner = asyncio.create_task(worker.run())

        async def drained() -> bool:
            return runner.done() or (await queue.stats())["length"] == 0

        await eventually(drained)
        worker.stop()
        stats = await runner
        assert stats.done == len(torn) and stats.dead_lettered == 0
        again = await scan_groups(st.topology, PATTERN, match="acct:*", mode=mode)
        assert again.torn == [] and again.consistent == GROUPS


async def test_scan_cli_enqueue_then_worker_cli(stampede_primaries: Any) -> None:
    """`stampede scan --enqueue` and a `stampede worker` process leave zero torn groups."""
    async with open_stampede(stampede_primaries, "shards") as st:
        torn = await populate(st, Mode.STAMP)
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    scan = ["scan", *urls, "--group-pattern", PATTERN, "--match", "acct:*"]
    first = await asyncio.to_thread(run_cli, *scan, "--enqueue", "--json")
    assert first.returncode == 1, first.stderr.decode()
    report = json.loads(first.stdout)
    assert {t["group"] for t in report["torn"]} == {g.decode() for g in torn}
    assert report["enqueued"] == len(torn) and report["groups"] == GROUPS
    worker = await start_cli(
        "worker",
        *urls,
        "--strategy",
        "newest-wins",
        "--concurrency",
        "8",
        "--health-interval",
        "0.5",
    )
    try:
        async with open_stampede(stampede_primaries, "shards") as st:
            queue = RepairQueue(st.topology)

            async def drained() -> bool:
                return (await queue.stats())["length"] == 0

            await eventually(drained)
    finally:
        worker.terminate()
        _, err = await asyncio.wait_for(worker.communicate(), timeout=30)
    assert worker.returncode == 0, err.decode()[-2000:]
    assert b'"event": "worker.stop"' in err and b'"event": "worker.health"' in err
    final = await asyncio.to_thread(run_cli, *scan, "--json")
    assert final.returncode == 0, final.stdout.decode()[-2000:]
    assert json.loads(final.stdout)["torn"] == []


async def test_scan_detects_commit_mode(topology_env: tuple[str, Any]) -> None:
    """Over a commit-mode keyspace, scan's default judges in commit mode, so groups whose
    record was lost are reported (stamp mode would call them clean)."""
    kind, env = topology_env
    async with open_stampede(env, kind) as st:
        torn = await populate(st, Mode.COMMIT, groups=600, torn_n=12)
        report = await scan_groups(st.topology, PATTERN, match="acct:*")
        lost = sum(n % 3 == 2 for n in range(12))  # groups whose record was deleted
        assert report.mode is Mode.COMMIT and report.committed == 600 - lost
        assert {t.group for t in report.torn} == torn
        assert all(t.mode is Mode.COMMIT for t in report.torn)
        with pytest.raises(ConfigurationError, match="have commit records"):
            await scan_groups(st.topology, PATTERN, match="acct:*", mode=Mode.STAMP)


async def test_scan_cli_modes_counts_and_exit_codes(stampede_primaries: Any) -> None:
    """The CLI: commit mode detected (JSON says so), --mode stamp refused (exit 2), the text
    summary shows every count, and an unreachable server is exit 3, not 1."""
    stampede_primaries.flushall()
    async with open_stampede(stampede_primaries, "shards") as st:
        torn = await populate(st, Mode.COMMIT, groups=300, torn_n=9)
        gone = keys_of(299)  # a deleted group reads not_found
        await st.delete("acct:299", gone, mode="commit")
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    scan = ["scan", *urls, "--group-pattern", PATTERN, "--match", "acct:*"]
    result = await asyncio.to_thread(run_cli, *scan, "--json")
    assert result.returncode == 1, result.stderr.decode()[-2000:]
    report = json.loads(result.stdout)
    assert report["mode"] == "commit" and report["committed"] == 300 - 3  # 3 records lost
    assert {t["group"] for t in report["torn"]} == {g.decode() for g in torn} - {"acct:299"}
    assert report["not_found"] == 1 and report["torn_count"] == len(report["torn"])

    text = await asyncio.to_thread(run_cli, *scan)
    assert text.returncode == 1
    summary = " ".join(text.stdout.decode().split())
    for count in (
        f"{report['keys_scanned']} keys",
        f"{report['groups']} groups",
        f"judged in commit mode ({report['committed']} with commit records)",
        f"{report['consistent']} consistent",
        "1 not found",
        f"{report['torn_count']} torn",
        f"{report['ignored_keys']} keys outside the pattern",
    ):
        assert count in summary, (count, summary)

    refused = await asyncio.to_thread(run_cli, *scan, "--mode", "stamp")
    assert refused.returncode == 3 and b"have commit records" in refused.stderr
    assert b"its own --match and --group-pattern" in refused.stderr  # flags, not Python
    assert refused.stderr.startswith(b"error: ") and b"Try " not in refused.stderr

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = await asyncio.to_thread(
        run_cli, "scan", "--url", f"redis://127.0.0.1:{port}", "--group-pattern", PATTERN
    )
    assert down.returncode == 3, down.stderr.decode()
    assert b"did not complete" in down.stderr and b"Traceback" not in down.stderr


async def test_scan_reports_keys_on_a_server_they_do_not_route_to(stampede_primaries: Any) -> None:
    """A key written under another URL order sits where reads never look: scan names it."""
    async with open_stampede(stampede_primaries, "shards") as st:
        await st.write("acct:1", {k: b"x" for k in keys_of(1)})
        home = st.topology.shard_of(b"acct:1:a")
        elsewhere = next(s for s in st.topology.shard_names if s != home)
        await st.topology.execute_on(elsewhere, "SET", "acct:1:a", b"stray")
        report = await scan_groups(st.topology, PATTERN, match="acct:*")
        assert report.misrouted == [b"acct:1:a"]
        assert report.consistent == 1  # the group itself, where it routes, is whole


async def test_a_scan_page_that_times_out_is_asked_again(stampede_primaries: Any) -> None:
    """A SCAN page held past the socket timeout (a moment of load) is asked again with
    the same cursor; the scan goes on and finds every group, not a `ShardTimeout`."""
    node = stampede_primaries.nodes[0]
    async with RedisProxy(node.address) as proxy:
        st = stampede.connect(
            [proxy.url, *stampede_primaries.urls[1:]],
            connection=ConnectOptions(socket_timeout=0.3, connect_timeout=2.0),
        )
        async with st:
            for i in range(30):
                await st.write(f"acct:{i}", {k: b"p" for k in keys_of(i)})
            rule = proxy.delay_reply(lambda cmd: cmd[0].upper() == b"SCAN", 1.0)
            report = await scan_groups(st.topology, PATTERN, match="acct:*", count=10)
        assert rule.hits == 1
        assert report.groups == report.consistent == 30
