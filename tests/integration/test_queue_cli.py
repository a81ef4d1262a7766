"""`stampede queue stats | dead | delayed | requeue`, JSON output, over real servers."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from stampede.errors import ConfigurationError
from stampede.repair import RepairQueue
from stampede.testing import LocalPrimaries

from ..support import open_stampede, run_cli
from .test_worker import plant


async def cli(*args: str) -> Any:
    result = await asyncio.to_thread(run_cli, "queue", *args, timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return json.loads(result.stdout)


async def test_stats_dead_and_requeue(stampede_primaries: LocalPrimaries) -> None:
    """Dead letters are listed with their error, requeued as fresh jobs and deleted;
    the counts follow, and a malformed dead letter is kept."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology, max_attempts=1)
        await queue.clear()
        await plant(st, queue, 3)
        for job in await queue.claim("w", 10):
            assert await queue.fail(job, "the database is unreachable")  # dead at once
        await st.topology.execute(queue.dead, "XADD", queue.dead, "*", "group", "junk")

        stats = await cli("stats", *urls, "--json")
        assert stats["dead"] == 4 and stats["length"] == 0 and stats["delayed"] == 0
        assert stats["streams"] == ["stampede:repairs"]

        dead = await cli("dead", *urls, "--json")
        assert len(dead) == 4
        assert sum(d.get("last_error") == "the database is unreachable" for d in dead) == 3

        results = await cli("requeue", *urls, "--all", "--json")
        outcomes = sorted(r["outcome"] for r in results)
        assert outcomes == ["malformed", "queued", "queued", "queued"]
        stats = await cli("stats", *urls, "--json")
        assert stats["dead"] == 1 and stats["length"] == 3
        jobs = await RepairQueue(st.topology).claim("w", 10)
        assert sorted(j.group for j in jobs) == [b"w:0", b"w:1", b"w:2"]
        assert all(j.attempts == 0 and j.last_error is None for j in jobs)

        (junk,) = await cli("dead", *urls, "--json")
        again = await cli("requeue", *urls, "--id", junk["id"], "--id", "1-1", "--json")
        assert [r["outcome"] for r in again] == ["malformed", "missing"]


async def test_usage_and_unreachable(stampede_primaries: LocalPrimaries) -> None:
    """requeue needs --id or --all (exit 2); an unreachable server is exit 3 with a message."""
    result = await asyncio.to_thread(
        run_cli, "queue", "requeue", "--url", stampede_primaries.urls[0], timeout=60
    )
    assert result.returncode == 2 and b"--all" in result.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await asyncio.to_thread(
        run_cli, "queue", "stats", "--url", f"redis://127.0.0.1:{port}", timeout=60
    )
    assert result.returncode == 3, result.stderr.decode()
    assert f"127.0.0.1:{port}".encode() in result.stderr and b"Traceback" not in result.stderr


async def test_dead_and_delayed_tables(stampede_primaries: LocalPrimaries) -> None:
    """Without --json, dead letters and waiting retries are tables with every column."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology, max_attempts=3)
        await queue.clear()
        await plant(st, queue, 2)
        first, second = await queue.claim("w", 10)
        assert not await queue.fail(first, "a retry", delay=600)  # waits for its retry
        assert await RepairQueue(st.topology, max_attempts=1).fail(second, "gone for good")

    def table(*args: str) -> str:
        result = run_cli("queue", *args, *urls, timeout=60)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        return result.stdout.decode()

    delayed = await asyncio.to_thread(table, "delayed")
    for heading in ("group", "attempts", "due", "delays (s)", "last error"):
        assert heading in delayed
    assert "a retry" in delayed and first.group.decode() in delayed
    dead = await asyncio.to_thread(table, "dead")
    for heading in ("id", "group", "attempts", "failed at", "last error"):
        assert heading in dead
    assert "gone for good" in dead and second.group.decode() in dead


async def test_requeue_keeps_dead_letters_another_program_wrote_malformed(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A dead letter whose keys are not all strings, or that has no group, is reported
    `malformed` and kept, never an exception (the CLI printed a traceback)."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        dead = queue.dead
        await st.topology.execute(dead, "XADD", dead, "*", "group", "g1", "keys", "[1, 2]")
        await st.topology.execute(dead, "XADD", dead, "*", "keys", '["a"]', "seen", "{}")
        await st.topology.execute(
            dead, "XADD", dead, "*", "group", "g3", "keys", '["a"]', "seen", '{"a": 5}'
        )
        results = await queue.requeue_dead()
        assert [r["outcome"] for r in results] == ["malformed"] * 3
        assert (await queue.stats())["dead"] == 3 and (await queue.stats())["length"] == 0

        result = await asyncio.to_thread(run_cli, "queue", "requeue", *urls, "--all", timeout=60)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        assert b"3 malformed" in result.stdout


async def test_delayed_lists_retries_another_program_wrote_malformed(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A waiting retry whose fields are not a JSON list of strings is listed with its
    group and due time, never an exception (the CLI printed a traceback)."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        stream = queue.streams[0]
        zkey, hkey = queue.delayed_key(stream), queue.retries_key(stream)
        for n, raw in enumerate(['{"a": 1}', "[[1], 2, {}, 3]", "not json"]):
            await st.topology.execute(zkey, "ZADD", zkey, 1000 + n, f"g{n}")
            await st.topology.execute(hkey, "HSET", hkey, f"g{n}", raw)
        waiting = await queue.delayed()
        assert [w["group"] for w in waiting] == ["g0", "g1", "g2"]
        assert [w["due_at"] for w in waiting] == [1.0, 1.001, 1.002]

        result = await asyncio.to_thread(run_cli, "queue", "delayed", *urls, timeout=60)
        assert result.returncode == 0, result.stderr.decode()[-2000:]
        assert b"g1" in result.stdout


async def test_a_bad_id_is_a_usage_error_and_a_refusal_is_not_unreachable(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`requeue --id nope` reached the server, which refused the id: exit 3 ("the
    servers cannot be reached") with a message naming neither the id nor the form to
    give. It is a usage error naming the id now, before anything is requeued; and a
    server's error reply (a key another program wrote) is exit 1, not 3."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology, max_attempts=1)
        await queue.clear()
        await plant(st, queue, 1)
        (job,) = await queue.claim("w", 10)
        assert await queue.fail(job, "boom")
        (dead,) = await queue.dead_letters()
        for bad in ("nope", "99999999999999999999999-1"):
            result = await asyncio.to_thread(
                run_cli, "queue", "requeue", *urls, "--id", dead["id"], "--id", bad, timeout=60
            )
            assert result.returncode == 2, result.stderr.decode()
            assert repr(bad).encode() in result.stderr and b"<ms>-<seq>" in result.stderr
        assert (await queue.stats())["dead"] == 1  # nothing requeued
        with pytest.raises(ConfigurationError, match="'nope' is not a dead letter id"):
            await queue.requeue_dead([dead["id"], "nope"])
        assert (await queue.stats())["dead"] == 1

        await queue.clear()
        await st.topology.execute(queue.dead, "SET", queue.dead, "not a stream")
        result = await asyncio.to_thread(run_cli, "queue", "dead", *urls, timeout=60)
        assert result.returncode == 1, result.stderr.decode()
        assert b"holds another type of value" in result.stderr
        assert b"Traceback" not in result.stderr
        await queue.clear()


async def test_a_queue_key_of_another_type(stampede_primaries: LocalPrimaries) -> None:
    """Another program's hash under the queue's stream name: `queue stats` reported
    zeros (exit 0), `worker --burst` "drained" at once and exit 0, `queue dead` over a
    hash at the dead-letter key printed the raw WRONGTYPE. Each is now exit 1 with one
    line naming the key and the fix; and a malformed --id is refused before anything
    is sent, instead of the server's "Invalid stream ID"."""
    url = stampede_primaries.urls[0]
    node = stampede_primaries.nodes[0].client()
    node.hset("other:stream", "field", "value")
    node.hset("other:dead", "field", "value")
    fix = b"holds another type of value (another program's key?); give the queue another name"
    for args in [
        ("queue", "stats", "--url", url, "--stream", "other:stream"),
        ("queue", "dead", "--url", url, "--stream", "other"),
        ("queue", "requeue", "--url", url, "--stream", "other", "--all"),
        (
            "worker",
            "--url",
            url,
            "--stream",
            "other:stream",
            "--strategy",
            "newest-wins",
            "--burst",
            "--log-level",
            "error",
        ),
    ]:
        result = await asyncio.to_thread(run_cli, *args, timeout=60)
        assert result.returncode == 1, (args, result.stderr.decode()[-2000:])
        assert fix in result.stderr and b"Traceback" not in result.stderr, args
    assert node.type("other:stream") == b"hash" and node.hgetall("other:dead")
    result = await asyncio.to_thread(
        run_cli, "queue", "requeue", "--url", url, "--id", "zzz", timeout=60
    )
    assert result.returncode == 2 and b"'zzz' is not a dead letter id" in result.stderr
