"""Promises of docs/operations.md that no other test pinned: the fields of
`stampede scan --json`, what its text summary prints, the metric families the
worker's `/metrics` serves and the fields of its JSON log lines ("Logs, metrics
and health")."""

from __future__ import annotations

import asyncio
import json

from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker, serve_metrics
from stampede.testing import LocalPrimaries

from ..support import open_stampede, run_cli, write_newer
from .test_worker import get, plant

PATTERN = r"(?P<group>promise:\d+):(?:a|b)"

SCAN_FIELDS = {
    "mode",
    "keys_scanned",
    "groups",
    "committed",
    "consistent",
    "not_found",
    "torn_count",
    "ignored_keys",
    "seconds",
    "enqueued",
    "torn",
    "misrouted",
}
"""The fields the docs list for `stampede scan --json` ("a report to keep")."""

METRICS = [
    ("stampede_worker_jobs_claimed_total", "counter"),
    ("stampede_worker_jobs_total", "counter"),
    ("stampede_worker_lost_races_total", "counter"),
    ("stampede_worker_errors_total", "counter"),
    ("stampede_worker_job_seconds", "histogram"),
    ("stampede_worker_jobs_in_hand", "gauge"),
    *((f"stampede_repair_queue_{name}", "gauge") for name in ("length", "pending", "lag")),
    *((f"stampede_repair_queue_{name}", "gauge") for name in ("delayed", "dead")),
    ("stampede_worker_uptime_seconds", "gauge"),
]
"""The worker's metric families as the table in docs/operations.md names them."""


async def test_scan_json_has_every_documented_field(stampede_primaries: LocalPrimaries) -> None:
    """One whole group, one torn group, one key on a server it does not route to: the
    JSON report has each field the docs list, each torn group its reason, mode and
    `<version>:<token>` per key, and the text summary prints the same counts."""
    async with open_stampede(stampede_primaries, "shards") as st:
        whole = [b"promise:1:a", b"promise:1:b"]
        await st.write("promise:1", dict.fromkeys(whole, b"v"))
        torn = [b"promise:2:a", b"promise:2:b"]
        await st.write("promise:2", dict.fromkeys(torn, b"v"))
        await write_newer(st, torn[:1], b"half")
        stray = b"promise:3:a"
        home = st.topology.shard_of(stray)
        elsewhere = next(n for n in st.topology.shard_names if n != home)
        await st.topology.execute_on(elsewhere, "SET", stray, b"lost")
        urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
        scan = ["scan", *urls, "--group-pattern", PATTERN, "--match", "promise:*"]
        try:
            result = await asyncio.to_thread(run_cli, *scan, "--json")
            text = await asyncio.to_thread(run_cli, *scan)
        finally:
            await st.topology.execute_on(elsewhere, "DEL", stray)
            await st.topology.execute(whole[0], "DEL", *whole)
            await st.topology.execute(torn[0], "DEL", *torn)
    assert result.returncode == 1, result.stderr.decode()
    report = json.loads(result.stdout)
    assert SCAN_FIELDS <= report.keys(), SCAN_FIELDS - report.keys()
    assert report["mode"] == "stamp" and report["torn_count"] == 1 and report["enqueued"] == 0
    assert report["consistent"] >= 1 and report["misrouted"] == [stray.decode()]
    (group,) = report["torn"]
    assert group["group"] == "promise:2" and group["mode"] == "stamp" and group["reason"]
    assert all(v.count(":") == 1 for v in group["seen"].values() if v), group["seen"]
    assert text.returncode == 1
    summary = " ".join(text.stdout.decode().split())
    assert "1 torn" in summary and "1 on a server they do not route to" in summary, summary
    assert "promise:3:a" in summary  # the misrouted key is named


async def test_worker_metrics_serve_every_documented_family(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`GET /metrics` has a TYPE line of the documented type for each worker metric
    (the process collectors and the library's metrics, which `stampede worker` adds,
    are pinned by test_worker.py's CLI test)."""
    async with open_stampede(stampede_primaries, "shards") as st:
        worker = Worker(st.topology, RepairQueue(st.topology), NewestWins())
        server = await serve_metrics(worker, 0)
        try:
            body = (await get(server.sockets[0].getsockname()[1], "/metrics")).decode()
        finally:
            server.close()
    for name, kind in METRICS:
        assert f"# TYPE {name} {kind}" in body, name


async def test_worker_json_log_lines_carry_the_documented_fields(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`--log-format json` (the default): one JSON object per stderr line; `worker.start`
    with consumer, strategy, concurrency, partitions and burst; `job.failed` with
    error, attempts and `retry_in`; `job.dead_lettered`; `worker.stop` with counts."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        await plant(st, queue, 1)
        urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
        result = await asyncio.to_thread(
            run_cli, "worker", *urls, "--strategy", "tests.worker_strategies:broken",
            "--burst", "--max-attempts", "2", "--retry-delay", "0",
        )  # fmt: skip
        await queue.clear()
    err = result.stderr.decode()
    assert result.returncode == 0, err[-2000:]
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]
    by_event = {line["event"]: line for line in lines}
    assert all({"time", "level", "logger"} <= line.keys() for line in lines)
    start = by_event["worker.start"]
    assert {"consumer", "strategy", "concurrency", "partitions", "burst"} <= start.keys()
    assert start["burst"] is True and start["partitions"] == 1
    failed = by_event["job.failed"]
    assert failed["level"] == "warning" and failed["logger"] == "stampede.worker"
    assert failed["group"] == "w:0" and failed["attempts"] == 1
    assert "the database is unreachable" in failed["error"] and failed["retry_in"] == 0
    assert by_event["job.dead_lettered"]["attempts"] == 2
    assert by_event["worker.stop"]["dead_lettered"] == 1
