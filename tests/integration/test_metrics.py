"""`stampede.metrics`: the library's prometheus_client registry, hooks, and the worker's
/healthz, which fails when Redis does."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

import stampede
from stampede import Envelope, RetryPolicy, Stampede, metrics
from stampede._kept import drop_kept
from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker, serve_metrics
from stampede.wire import new_token

from ..support import FAST, spread_keys
from .test_worker import get, plant


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_library_metrics_have_help_labels_and_hooks() -> None:
    """Recording functions feed the registry (HELP, TYPE, labels) and every hook."""
    got: list[tuple[str, float, dict[str, str]]] = []

    def hook(name: str, value: float, labels: Mapping[str, str]) -> None:
        got.append((name, value, dict(labels)))

    def broken(name: str, value: float, labels: Mapping[str, str]) -> None:
        raise RuntimeError("a hook that raises is not our problem")

    before = sample("stampede_torn_reads_total", reason="partial")
    metrics.add_hook(broken)
    metrics.add_hook(hook)
    try:
        metrics.torn_read("partial")
        metrics.read_retry()
        metrics.repair("rewritten", "read")
        metrics.lost_race("read")
        metrics.write_latency(0.003, "ok")
    finally:
        metrics.remove_hook(hook)
        metrics.remove_hook(broken)
    assert sample("stampede_torn_reads_total", reason="partial") == before + 1
    assert [g[0] for g in got] == [
        "stampede_torn_reads",
        "stampede_read_retries",
        "stampede_repairs",
        "stampede_lost_races",
        "stampede_write_seconds",
    ]
    assert got[2][2] == {"action": "rewritten", "source": "read"}
    text = generate_latest(metrics.REGISTRY).decode()
    assert "# HELP stampede_repairs_total Repairs by what they did" in text
    assert 'stampede_write_seconds_bucket{le="0.005",outcome="ok"}' in text


DELETED = {"action": "deleted", "source": "read"}


def test_mount_exposes_the_library_metrics_in_another_registry() -> None:
    app = CollectorRegistry()
    metrics.mount(app)
    metrics.mount(app)  # idempotent
    try:
        metrics.repair("deleted", "read")
        assert (
            app.get_sample_value("stampede_repairs_total", {"action": "deleted", "source": "read"})
            or 0
        ) >= 1
    finally:
        metrics.unmount(app)
    assert (
        app.get_sample_value("stampede_repairs_total", {"action": "deleted", "source": "read"})
        is None
    )


async def test_worker_repairs_count_in_the_library_metrics(st: Stampede) -> None:
    queue = RepairQueue(st.topology)
    await queue.clear()
    await plant(st, queue, 3)
    before = sample("stampede_repairs_total", action="rewritten", source="worker")
    stats = await Worker(st.topology, queue, NewestWins(), burst=True, poll_interval=0.01).run()
    assert stats.repaired == 3
    assert sample("stampede_repairs_total", action="rewritten", source="worker") == before + 3


async def test_healthz_fails_when_redis_does() -> None:
    """/healthz answers 503 naming the shard that does not answer PING; /metrics still works."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    st = stampede.connect(f"redis://127.0.0.1:{port}", connection=FAST)  # never opened
    worker = Worker(st.topology, RepairQueue(st.topology), NewestWins())
    server = await serve_metrics(worker, 0)
    http = server.sockets[0].getsockname()[1]
    try:
        health, body, missing = await asyncio.gather(
            get(http, "/healthz"), get(http, "/metrics"), get(http, "/nothing")
        )
    finally:
        server.close()
        await st.aclose()
    assert health.startswith(b"HTTP/1.1 503 Service Unavailable")
    assert f"127.0.0.1:{port}".encode() in health
    assert body.startswith(b"HTTP/1.1 200 OK") and b"stampede_worker_jobs_total" in body
    assert missing.startswith(b"HTTP/1.1 404")


async def test_reads_and_writes_report_to_the_library_metrics(st: Stampede) -> None:
    """Writes report their latency; a read of an in-flight group reports a kept read; a
    torn read reports its reason and the repair its action, through the hooks."""
    seen: list[tuple[str, dict[str, str]]] = []

    def hook(name: str, value: float, labels: Mapping[str, str]) -> None:
        seen.append((name, dict(labels)))

    metrics.add_hook(hook)
    try:
        keys = spread_keys(st, "m", 2)
        await st.write("m", dict.fromkeys(keys, b"old"))
        await land_newer(st, keys[:1])  # a newer write reached one key: in flight
        await st.read("m", keys)
        await drop_kept(st.topology, keys)
        await st.read("m", keys, retry=RetryPolicy(attempts=1), repair=NewestWins())
    finally:
        metrics.remove_hook(hook)
    names = [n for n, _ in seen]
    assert ("stampede_write_seconds", {"outcome": "ok"}) in seen
    assert "stampede_kept_reads" in names
    assert ("stampede_torn_reads", {"reason": "torn"}) in seen
    assert ("stampede_repairs", {"action": "rewritten", "source": "read"}) in seen


async def land_newer(st: Stampede, keys: list[str]) -> None:
    raw = [k.encode() for k in keys]
    stored = Envelope.decode(await st.topology.execute(raw[0], "GET", raw[0]))
    version, token = stored.version + 1, new_token()
    value = Envelope(version, token, b"new").encode()
    out = await st.topology.write_guarded(raw, [value] * len(raw), version=version, token=token)
    assert out.ok


def test_an_event_field_that_is_not_utf8_is_logged_escaped(caplog: Any) -> None:
    """A field carrying surrogate escapes (a key decoded with `surrogateescape`, an
    error naming it) is logged backslash-escaped: a UTF-8 handler can write the line,
    and so can anything that ships the record on (it broke pytest-xdist's report)."""
    log = logging.getLogger("stampede.test-events")
    with caplog.at_level(logging.INFO, logger="stampede.test-events"):
        metrics.log_event(log, "job.failed", error="no row for b'\udcff'", count=1)
    (record,) = caplog.records
    record.getMessage().encode("utf-8")
    assert record.error.encode("utf-8") == b"no row for b'\\udcff'"
