"""The repair worker: crash recovery, graceful stop, bad input, dead letters, metrics."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
from collections.abc import Sequence
from typing import Any

import pytest

from stampede import Envelope, Stampede
from stampede.repair import NewestWins, Refetch, RepairQueue, RetryBackoff
from stampede.repair._queue import Job
from stampede.repair._worker import Worker, serve_metrics
from stampede.testing import LocalPrimaries
from stampede.wire import new_token

from ..support import Holding, eventually, open_stampede, run_cli, start_cli
from ..worker_strategies import StallsAfter, broken, stuck

GROUPS = 120


async def plant(st: Stampede, queue: RepairQueue, n: int) -> dict[str, tuple[int, str]]:
    """`n` torn groups queued for repair; returns each group's expected repair stamp."""
    expected: dict[str, tuple[int, str]] = {}
    for i in range(n):
        group, keys = f"w:{i}", [f"w:{i}:a", f"w:{i}:b", f"w:{i}:c"]
        receipt = await st.write(group, dict.fromkeys(keys, b"old"))
        token = new_token()
        version = receipt.version + 1
        first = keys[0].encode()
        env = Envelope(version, token, b"new").encode()
        await st.topology.write_guarded([first], [env], version=version, token=token)
        await queue.enqueue(group, keys, {}, "torn")
        expected[group] = (version, token)
    return expected


async def check_repaired(st: Stampede, expected: dict[str, tuple[int, str]]) -> None:
    """Every group is whole under a repair's own stamp: the version of its newest write
    and a token ordered after that write's, with the expected payloads."""
    for group, (version, token) in expected.items():
        keys = [f"{group}:a", f"{group}:b", f"{group}:c"]
        result = await st.read(group, keys)
        assert result.version == version and result.token is not None, group
        assert result.token > token, group
        assert result.values == {keys[0]: b"new", keys[1]: b"old", keys[2]: b"old"}


def events(stderr: bytes) -> list[dict[str, Any]]:
    """The worker's log: one JSON object per line (the default `--log-format json`)."""
    out = [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]
    assert all(isinstance(e, dict) for e in out)
    return [e for e in out if "event" in e]


async def test_killed_worker_jobs_are_finished_by_another(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A worker SIGKILLed mid-batch loses nothing: a second one reclaims and finishes its jobs."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        expected = await plant(st, queue, GROUPS)
        common = ["--concurrency", "8", "--min-idle", "1", "--max-attempts", "3"]
        stalls = ["--strategy", "tests.worker_strategies:stalls_after_16"]
        first = await start_cli("worker", *urls, *common, *stalls, "--consumer", "first")

        async def some_done() -> bool:  # 16 repaired, and 8 more held for ever
            stats = await queue.stats()
            return stats["length"] <= GROUPS - 16 and stats["pending"] == 8

        await eventually(some_done)
        first.kill()
        await first.wait()
        assert first.returncode == -signal.SIGKILL
        left = await queue.stats()
        assert left["pending"] > 0 and left["length"] > 0  # jobs died in its hands
        slow = ["--strategy", "tests.worker_strategies:slow"]
        second = await start_cli("worker", *urls, *common, *slow, "--consumer", "second")

        async def drained() -> bool:
            return (await queue.stats())["length"] == 0

        await eventually(drained, within=60)
        second.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(second.communicate(), timeout=30)
        assert second.returncode == 0, err.decode()[-2000:]
        log = events(err)
        assert any(e.get("deliveries", 1) > 1 for e in log if e["event"] == "job.done")
        assert not [e for e in log if e["event"] == "job.dead_lettered"]
        assert (await queue.stats())["dead"] == 0
        await check_repaired(st, expected)


async def test_sigterm_finishes_or_releases_jobs_in_hand(
    stampede_primaries: LocalPrimaries,
) -> None:
    """SIGTERM stops claiming, lets jobs in hand finish, and exits 0; nothing is stranded."""
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        expected = await plant(st, queue, 40)
        worker = await start_cli(
            "worker", *urls, "--strategy", "tests.worker_strategies:slow", "--concurrency", "4"
        )

        async def started() -> bool:
            return (await queue.stats())["pending"] > 0

        await eventually(started)
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), timeout=30)
        assert worker.returncode == 0, err.decode()[-2000:]
        assert (await queue.stats())["pending"] == 0  # finished or handed back, not stranded
        rest = Worker(st.topology, queue, NewestWins(), concurrency=8, poll_interval=0.01)
        runner = asyncio.create_task(rest.run())

        async def drained() -> bool:
            return (await queue.stats())["length"] == 0

        await eventually(drained)
        rest.stop()
        await runner
        await check_repaired(st, expected)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no.such.module:make", "cannot import 'no.such.module'"),
        ("tests.worker_strategies:missing", "has no 'missing'"),
        ("tests.worker_strategies:not_a_strategy", "not a repair strategy"),
        ("tests.worker_strategies:raising_factory", "factory raised RuntimeError"),
        ("newest", "neither a built-in"),
    ],
)
async def test_bad_strategy_is_a_usage_error(spec: str, message: str) -> None:
    """A strategy that does not load gives exit 2 and a message, never a traceback."""
    result = await asyncio.to_thread(
        run_cli, "worker", "--url", "redis://127.0.0.1:1", "--strategy", spec
    )
    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert b"Traceback" not in result.stderr


async def test_failing_loader_dead_letters_and_worker_keeps_going(st: Stampede) -> None:
    """Jobs whose repair keeps failing end as dead letters with the reason; the worker runs on."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    await plant(st, queue, 3)
    stream = queue.streams[0]
    await st.topology.execute(stream, "XADD", stream, "*", "group", "poison", "keys", "[oops")
    worker = Worker(st.topology, queue, broken(), concurrency=2, poll_interval=0.01)
    runner = asyncio.create_task(worker.run())

    async def all_dead() -> bool:
        return (await queue.stats())["dead"] == 4

    await eventually(all_dead)
    assert not runner.done()
    worker.stop()
    stats = await runner
    assert stats.dead_lettered == 4 and stats.done == 0
    dead = await queue.dead_letters()
    errors = sorted(d["last_error"] for d in dead)
    assert errors[0].startswith("RepairError") or "unreachable" in errors[0]
    assert any("malformed" in e for e in errors)
    assert sum("the database is unreachable" in e for e in errors) == 3


async def test_the_worker_deletes_with_the_configured_tombstone_grace(st: Stampede) -> None:
    """A group the source says is gone gets tombstones that live the worker's
    `tombstone_grace` (the option the deletes and reads use), not a fixed 300 s: a
    late older write is kept out for as long as the application configured."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    await plant(st, queue, 1)

    async def gone(group: bytes, keys: Sequence[bytes]) -> None:
        return None

    worker = Worker(
        st.topology, queue, Refetch(gone), tombstone_grace=3600, burst=True, poll_interval=0.01
    )
    stats = await worker.run()
    assert stats.done == 1
    for key in ("w:0:a", "w:0:b", "w:0:c"):
        assert Envelope.decode(await st.topology.execute(key.encode(), "GET", key)).tombstone
        assert await st.topology.execute(key.encode(), "PTTL", key) > 3_000_000


async def test_the_worker_cli_takes_the_tombstone_grace(stampede_primaries: Any) -> None:
    """`stampede worker --tombstone-grace` sets how long its deletes' tombstones live."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology, name="grace")
        await queue.clear()
        await plant(st, queue, 1)
        args = ["worker", *(a for u in stampede_primaries.urls for a in ("--url", u))]
        args += ["--strategy", "tests.worker_strategies:gone", "--stream", "grace"]
        done = await asyncio.to_thread(run_cli, *args, "--burst", "--tombstone-grace", "3600")
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        for key in ("w:0:a", "w:0:b", "w:0:c"):
            assert await st.topology.execute(key.encode(), "PTTL", key) > 3_000_000


async def test_a_hung_repair_times_out_and_is_dead_lettered(st: Stampede) -> None:
    """A strategy that never returns (a hung loader) no longer holds its job until
    SIGTERM: past `job_timeout` the attempt fails, is retried, and dead-lettered by
    the usual policy, naming the timeout."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    await plant(st, queue, 2)
    worker = Worker(
        st.topology,
        queue,
        stuck(),
        job_timeout=0.2,
        backoff=RetryBackoff(base=0),
        poll_interval=0.01,
    )
    runner = asyncio.create_task(worker.run())

    async def all_dead() -> bool:
        return (await queue.stats())["dead"] == 2

    await eventually(all_dead)
    worker.stop()
    await runner
    dead = await queue.dead_letters()
    assert all("job timeout (0.2 s)" in d["last_error"] for d in dead)


async def test_a_worker_that_reaches_no_server_at_start_exits_3() -> None:
    """Nothing answers at start: after its connection attempts the worker exits with
    status 3 and one line saying which servers did not answer (it used to log
    claim_failed forever)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = ["worker", "--url", f"redis://127.0.0.1:{port}", "--strategy", "newest-wins"]
    done = await asyncio.to_thread(
        run_cli, *args, "--connect-attempts", "2", "--socket-timeout", "0.5"
    )
    err = done.stderr.decode()
    assert done.returncode == 3, err
    assert f"no server answered (redis://127.0.0.1:{port}) after 2 attempts" in err
    assert "Traceback" not in err


async def test_worker_usage_and_runtime_errors_are_one_clear_line(
    stampede_primaries: Any,
) -> None:
    """No --strategy is a usage error (exit 2), whatever click's version; a metrics port
    in use is a runtime error (exit 1) in one line, with no traceback and no "Try --help"."""
    url = stampede_primaries.urls[0]
    missing = await asyncio.to_thread(run_cli, "worker", "--url", url)
    assert missing.returncode == 2 and b"Missing option '--strategy'" in missing.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["worker", "--url", url, "--strategy", "newest-wins", "--burst"]
        taken = await asyncio.to_thread(run_cli, *args, "--metrics-port", str(port))
    err = taken.stderr.decode()
    assert taken.returncode == 1, err
    assert f"cannot serve metrics on 127.0.0.1:{port}" in err and "--metrics-port" in err
    assert "Traceback" not in err and "Try " not in err


async def get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
    body = await reader.read()
    writer.close()
    return body


async def test_metrics_endpoint_serves_prometheus_text(st: Stampede) -> None:
    """The optional metrics port answers with the worker's counters as Prometheus text
    (prometheus_client's exposition: HELP and TYPE lines, labels), and /healthz is 200."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    worker = Worker(st.topology, queue, NewestWins())
    worker.stats.repaired = 7
    worker.stats.error("claim")
    server = await serve_metrics(worker, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        body = await get(port, "/metrics")
        health = await get(port, "/healthz")
    finally:
        server.close()
    assert body.startswith(b"HTTP/1.1 200 OK")
    assert b"# HELP stampede_worker_jobs_total Jobs this worker finished" in body
    assert b"# TYPE stampede_worker_jobs_total counter" in body
    assert b'stampede_worker_jobs_total{outcome="repaired"} 7.0' in body
    assert b'stampede_worker_errors_total{kind="claim"} 1.0' in body
    assert b"stampede_repair_queue_lag" in body and b"stampede_repair_queue_delayed" in body
    assert health.startswith(b"HTTP/1.1 200 OK")
    assert all(shard.encode() + b" ok" in health for shard in st.topology.shard_names)


async def test_worker_cli_serves_metrics_on_the_chosen_address(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`stampede worker --metrics-port P --metrics-host H` answers on H:P while it runs."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    worker = await start_cli(
        "worker", *urls, "--strategy", "newest-wins",
        "--metrics-port", str(port), "--metrics-host", "0.0.0.0",
    )  # fmt: skip
    body = b""

    async def answers() -> bool:
        nonlocal body
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        body = await reader.read()
        writer.close()
        return True

    try:
        await eventually(answers, within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), timeout=30)
    assert worker.returncode == 0, err.decode()[-2000:]
    assert body.startswith(b"HTTP/1.1 200 OK")
    assert b'stampede_worker_jobs_total{outcome="repaired"} 0.0' in body
    assert b"process_cpu_seconds_total" in body  # process metrics
    assert b"# HELP stampede_repairs_total" in body  # the library's own metrics


class _Watched(RepairQueue):
    """A queue that counts the `reclaim` calls begun after `since` (a loop time)."""

    since = float("inf")
    late = 0

    async def reclaim(self, consumer: str, count: int, *, in_hand: Any = ()) -> list[Job]:
        if asyncio.get_running_loop().time() >= self.since:
            self.late += 1
        return await super().reclaim(consumer, count, in_hand=in_hand)


async def test_a_job_in_hand_past_min_idle_is_not_taken_over(st: Stampede) -> None:
    """A live worker's job that runs longer than min_idle (the defaults allow it: 30 s
    min_idle, 60 s job timeout) stays its own: its worker's next claims do not take it
    again (a second repair of it, and a delivery counted as a worker death)."""
    queue = _Watched(st.topology, min_idle=1.0)
    await queue.clear()
    await plant(st, queue, 1)
    strategy = Holding()
    worker = Worker(
        st.topology, queue, strategy, concurrency=4, poll_interval=0.01, block_ms=10,
        job_timeout=None, sweep_interval=0,
    )  # fmt: skip
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(strategy.entered.wait(), 30)
        queue.since = asyncio.get_running_loop().time() + 3 * 1.0  # well past min_idle

        async def claimed_long_after() -> bool:
            return queue.late >= 3 or len(strategy.calls) > 1

        await eventually(claimed_long_after)
        assert strategy.calls == [b"w:0"]  # taken once, by its live worker
        assert await queue.reclaim("other-worker", 10) == []  # nor by another worker
    finally:
        strategy.release.set()
        worker.stop()
        await running
    assert strategy.calls == [b"w:0"] and worker.stats.counts()["done"] == 1


class _RaisesSurrogates:
    """A strategy whose error names a key that is not UTF-8, decoded with surrogateescape."""

    name = "raises-surrogates"

    async def repair(self, ctx: Any, obs: Any, verdict: Any) -> Any:
        key = b"w:0:\xff".decode("utf-8", "surrogateescape")
        raise LookupError(f"no row for {key}")


async def test_an_error_that_is_not_utf8_is_recorded_as_a_retry(st: Stampede) -> None:
    """The failure's message goes on the retry (and the dead letter) escaped; it raised
    UnicodeEncodeError in the job's task, so the failure was never recorded."""
    queue = RepairQueue(st.topology, max_attempts=2)
    await queue.clear()
    await plant(st, queue, 1)
    worker = Worker(
        st.topology, queue, _RaisesSurrogates(), poll_interval=0.01, block_ms=10,
        backoff=RetryBackoff(base=0), sweep_interval=0, burst=True,
    )  # fmt: skip
    await asyncio.wait_for(worker.run(), 60)
    (dead,) = await queue.dead_letters()
    assert dead["attempts"] == "2" and dead["last_error"].startswith("LookupError: no row for")
    assert worker.stats.counts()["dead_lettered"] == 1


async def test_a_worker_cancelled_while_full_leaves_no_task_behind(
    stampede_primaries: LocalPrimaries,
) -> None:
    """A worker whose own task is cancelled while every slot holds a job (waiting for one
    to finish, or for stop()) ends every task it started, its wait for stop() too."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        await plant(st, queue, 2)
        before = asyncio.all_tasks()
        worker = Worker(
            st.topology, queue, StallsAfter(0), concurrency=1, poll_interval=0.01, grace=0.05
        )
        run = asyncio.ensure_future(worker.run())

        async def full() -> bool:
            return worker.stats.in_hand == 1  # then it waits, full, at once

        await eventually(full)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await asyncio.sleep(0)  # the tasks it cancelled see their cancellation
        left = [t for t in asyncio.all_tasks() - before if not t.done()]
        assert left == [], left
