"""The worker in production: a factory's pool in the worker's loop, retry backoff, logs,
burst, grace, settings from the environment, and bad input that gets a message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from stampede import Stampede
from stampede.repair import Refetch, RepairQueue
from stampede.repair._loading import open_strategy
from stampede.repair._worker import RetryBackoff, Worker
from stampede.testing import LocalPrimaries

from ..support import child_env, eventually, open_stampede, run_cli
from ..worker_strategies import PG_DSN, broken
from .test_worker import check_repaired, events, plant

STAMPEDE = str(Path(sys.executable).with_name("stampede"))


def url_args(env: LocalPrimaries) -> list[str]:
    return [a for url in env.urls for a in ("--url", url)]


async def spawn(
    *args: str, env: dict[str, str] | None = None, cwd: str | None = None
) -> asyncio.subprocess.Process:
    """`python -m stampede.cli ARGS` with extra environment variables, stderr piped."""
    full = {**child_env(), **(env or {})}  # this checkout's stampede, not an installed one
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stampede.cli", *args, stderr=asyncio.subprocess.PIPE, env=full,
        cwd=cwd,
    )  # fmt: skip


async def finish(proc: asyncio.subprocess.Process, *, within: float = 60) -> bytes:
    _, err = await asyncio.wait_for(proc.communicate(), timeout=within)
    return err


async def drained(queue: RepairQueue) -> bool:
    stats = await queue.stats()
    return stats["length"] == 0 and stats["pending"] == 0


# --- PostgreSQL ---------------------------------------------------------------------


@pytest.fixture
async def pg_table() -> AsyncIterator[tuple[asyncpg.Pool, str]]:
    """A table of 100 rows (id, a, b, c) of its own, dropped after the test."""
    try:
        pool = await asyncpg.create_pool(PG_DSN, min_size=1, max_size=2)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"PostgreSQL at {PG_DSN} is not reachable ({exc}); set STAMPEDE_TEST_POSTGRES_DSN"
        )
    name = f"stampede_worker_{secrets.token_hex(4)}"
    await pool.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, a text, b text, c text)")
    try:
        await pool.executemany(
            f"INSERT INTO {name} VALUES ($1, $2, $3, $4)",
            [(i, f"a{i} from pg", f"b{i} from pg", f"c{i} from pg") for i in range(100)],
        )
        yield pool, name
    finally:
        await pool.execute(f"DROP TABLE IF EXISTS {name}")
        await pool.close()


async def check_from_table(st: Stampede, n: int) -> None:
    for i in range(n):
        keys = [f"w:{i}:a", f"w:{i}:b", f"w:{i}:c"]
        result = await st.read(f"w:{i}", keys)
        assert result.consistent, i
        assert result.values == {k: f"{k[-1]}{i} from pg".encode() for k in keys}


@pytest.mark.postgres
async def test_cli_async_factory_pool_repairs_then_sigterm_closes_it(
    stampede_primaries: LocalPrimaries, pg_table: tuple[asyncpg.Pool, str], tmp_path: Path
) -> None:
    """`stampede worker --strategy mod:async_factory` opening an asyncpg pool repairs 100
    torn groups from PostgreSQL; SIGTERM runs on_shutdown (the pool closes) and exits 0."""
    _, table = pg_table
    closed = tmp_path / "closed"
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        await plant(st, queue, 100)
        worker = await spawn(
            "worker", *url_args(stampede_primaries), "--strategy",
            "tests.worker_strategies:pg_pool_factory", "--concurrency", "8",
            env={"STAMPEDE_TEST_PG_TABLE": table, "STAMPEDE_TEST_PG_CLOSED": str(closed)},
        )  # fmt: skip
        try:
            await eventually(lambda: drained(queue), within=60)
        finally:
            worker.send_signal(signal.SIGTERM)
            err = await finish(worker)
        assert worker.returncode == 0, err.decode()[-3000:]
        assert b"never awaited" not in err and b"Traceback" not in err, err.decode()[-3000:]
        assert closed.read_text() == "closed"  # on_shutdown ran and closed the pool
        log = events(err)
        done = [e for e in log if e["event"] == "job.done"]
        assert len(done) == 100 and {e["action"] for e in done} == {"rewritten"}
        assert [e["event"] for e in log if e["event"].startswith("strategy.")] == [
            "strategy.started",
            "strategy.stopped",
        ]
        assert (await queue.stats())["dead"] == 0
        await check_from_table(st, 100)


@pytest.mark.postgres
async def test_factory_as_async_context_manager_runs_in_the_loop(
    st: Stampede, pg_table: tuple[asyncpg.Pool, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A factory returning an async context manager: entered in this loop, the pool works,
    and it is exited after the work."""
    _, table = pg_table
    monkeypatch.setenv("STAMPEDE_TEST_PG_TABLE", table)
    queue = RepairQueue(st.topology)
    await queue.clear()
    await plant(st, queue, 5)
    async with open_strategy("tests.worker_strategies:pg_pool_context") as strategy:
        assert isinstance(strategy, Refetch)
        stats = await Worker(st.topology, queue, strategy, burst=True, poll_interval=0.01).run()
    assert stats.repaired == 5 and stats.dead_lettered == 0
    await check_from_table(st, 5)


@pytest.mark.postgres
async def test_database_down_for_5s_dead_letters_nothing(
    st: Stampede, pg_table: tuple[asyncpg.Pool, str]
) -> None:
    """The database refuses every query for 5 s; the attempts' delays add up to more than
    that (at least 5.75 s before the last), so every job is repaired, none dead-lettered,
    and the delays are on the waiting jobs' fields."""
    pool, table = pg_table
    down = True

    async def load(group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes] | None:
        if down:
            raise ConnectionRefusedError("database down")
        uid = int(group.split(b":")[1])
        row = await pool.fetchrow(f"SELECT a, b, c FROM {table} WHERE id = $1", uid)
        return {k: row[k.rsplit(b":", 1)[1].decode()].encode() for k in keys}

    queue = RepairQueue(st.topology, max_attempts=8)
    await queue.clear()
    await plant(st, queue, 20)
    backoff = RetryBackoff(base=0.5, max_delay=2.0)  # min 0.25+0.5+1+1+1+1+1 s over 8 tries
    worker = Worker(
        st.topology, queue, Refetch(load), concurrency=8, poll_interval=0.05, backoff=backoff
    )
    runner = asyncio.create_task(worker.run())
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(50):  # 5 s down, watching the retries wait
        for item in await queue.delayed(100):
            seen[item["group"]] = item
        await asyncio.sleep(0.1)
    down = False
    await eventually(lambda: drained(queue), within=30)
    worker.stop()
    stats = await runner
    assert stats.dead_lettered == 0 and (await queue.stats())["dead"] == 0
    assert stats.repaired == 20 and stats.failed >= 20
    await check_from_table(st, 20)
    assert len(seen) == 20
    deepest = max(seen.values(), key=lambda item: int(item["attempts"]))
    delays = json.loads(deepest["delays"])
    assert int(deepest["attempts"]) == len(delays) >= 3
    for n, delay in enumerate(delays, 1):  # each within its backoff bounds, none zero
        raw = min(2.0, 0.5 * 2 ** (n - 1))
        assert raw / 2 <= delay <= raw
    assert (
        deepest["last_error"].startswith("RepairError")
        and "database down" in (deepest["last_error"])
    )
    assert float(deepest["retry_at"]) == pytest.approx(deepest["due_at"], abs=0.01)


# --- retry backoff, without a database -------------------------------------------------


async def test_a_failed_job_is_not_claimable_before_its_delay(st: Stampede) -> None:
    """fail(delay=...) parks the retry: no claim sees it, an enqueue is covered by it,
    and once due it is claimable with its delays and last error on its fields."""
    queue = RepairQueue(st.topology)
    await queue.clear()
    await queue.enqueue("bo", ["bo:a", "bo:b"], {}, "torn")
    (job,) = await queue.claim("w", 10)
    assert not await queue.fail(job, "boom", delay=30)
    assert await queue.claim("w", 10) == []
    stats = await queue.stats(detailed=True)
    assert stats["delayed"] == 1 and stats["length"] == 1 and stats["pending"] == 0
    (waiting,) = await queue.delayed()
    assert waiting["group"] == "bo" and waiting["attempts"] == "1"
    assert json.loads(waiting["delays"]) == [30.0] and waiting["last_error"] == "boom"
    assert await queue.enqueue("bo", ["bo:a", "bo:b"], {}, "torn") is None  # covered
    assert await queue.claim("w", 10) == []

    await queue.enqueue("soon", ["soon:a"], {}, "torn")
    (job,) = await queue.claim("w", 10)
    assert not await queue.fail(job, "boom", delay=0.2)

    async def claimed() -> bool:
        nonlocal job
        jobs = await queue.claim("w", 10)
        if jobs:
            (job,) = jobs
        return bool(jobs)

    await eventually(claimed)
    assert job.group == b"soon" and job.attempts == 1 and job.delays == (0.2,)
    assert await queue.ack(job) is None
    assert (await queue.stats(detailed=True))["delayed"] == 1  # "bo" still waits


async def test_worker_spaces_attempts_by_its_backoff(st: Stampede) -> None:
    """Without jitter the delays are exact: base, then doubled; the dead letter keeps them."""
    queue = RepairQueue(st.topology, max_attempts=3)
    await queue.clear()
    await plant(st, queue, 1)
    worker = Worker(
        st.topology,
        queue,
        broken(),
        poll_interval=0.01,
        backoff=RetryBackoff(base=0.2, jitter=0),
    )
    runner = asyncio.create_task(worker.run())

    async def dead() -> bool:
        return (await queue.stats())["dead"] == 1

    await eventually(dead)
    worker.stop()
    stats = await runner
    assert stats.failed == 2 and stats.dead_lettered == 1
    (letter,) = await queue.dead_letters()
    assert json.loads(letter["delays"]) == [0.2, 0.4] and letter["attempts"] == "3"


def test_backoff_bounds() -> None:
    """Each delay lies in [raw * (1 - jitter), raw], raw = min(max, base * factor**(n-1))."""
    backoff = RetryBackoff(base=1.0, factor=2.0, max_delay=5.0, jitter=0.5)
    for n, raw in enumerate([1.0, 2.0, 4.0, 5.0, 5.0], 1):
        for _ in range(50):
            assert raw * 0.5 <= backoff.delay(n) <= raw
    assert RetryBackoff(base=0).delay(3) == 0


# --- the CLI ----------------------------------------------------------------------------


async def test_json_logs_parse_line_by_line_and_burst_exits(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`--burst --log-format json` (settings from STAMPEDE_* variables): every stderr line
    is one JSON object; the worker drains the queue and exits 0 by itself."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        expected = await plant(st, queue, 10)
        env = {
            "STAMPEDE_URLS": ",".join(stampede_primaries.urls),
            "STAMPEDE_STRATEGY": "newest-wins",
            "STAMPEDE_LOG_FORMAT": "json",
        }
        proc = await spawn("worker", "--burst", env=env)
        err = await finish(proc)
        assert proc.returncode == 0, err.decode()[-3000:]
        lines = [json.loads(line) for line in err.decode().splitlines()]
        assert lines and all({"time", "level", "logger"} <= set(e) for e in lines)
        names = [e.get("event") for e in lines]
        assert names[0] == "worker.start" and names[-1] == "worker.stop"
        assert names.count("job.done") == 10 and "worker.drained" in names
        assert lines[-1]["done"] == 10 and lines[-1]["repaired"] == 10
        await check_repaired(st, expected)

        text = await spawn("worker", "--burst", "--log-format", "text", env=env)
        err = await finish(text)
        assert text.returncode == 0, err.decode()
        first = err.decode().splitlines()[0]
        assert " INFO stampede.worker worker.start consumer=" in first


async def test_grace_hands_back_jobs_that_do_not_finish(stampede_primaries: LocalPrimaries) -> None:
    """SIGTERM with `--grace 0.2`: jobs stuck in hand are released, the worker exits 0."""
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology)
        await queue.clear()
        await plant(st, queue, 4)
        proc = await spawn(
            "worker", *url_args(stampede_primaries), "--strategy", "tests.worker_strategies:stuck",
            "--grace", "0.2", "--concurrency", "4",
        )  # fmt: skip

        async def in_hand() -> bool:
            return (await queue.stats())["pending"] == 4

        try:
            await eventually(in_hand)
        finally:
            proc.send_signal(signal.SIGTERM)
            err = await finish(proc)
        assert proc.returncode == 0, err.decode()[-2000:]
        (stop,) = [e for e in events(err) if e["event"] == "worker.stop"]
        assert stop["released"] == 4
        taken = await queue.claim("next-worker", 10)  # handed back: taken over at once
        assert sorted(j.group for j in taken) == sorted(f"w:{i}".encode() for i in range(4))
        assert all(j.deliveries == 1 for j in taken)  # a hand-back is no worker's death


async def test_strategy_from_the_current_directory(
    stampede_primaries: LocalPrimaries, tmp_path: Path
) -> None:
    """The `stampede` script imports `--strategy` modules from the current directory."""
    (tmp_path / "local_repairs.py").write_text(
        "from stampede.repair import NewestWins\n\ndef make():\n    return NewestWins()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = await asyncio.create_subprocess_exec(
        STAMPEDE, "worker", *url_args(stampede_primaries), "--strategy", "local_repairs:make",
        "--burst", "--stream", f"cwd:{secrets.token_hex(4)}",
        stderr=asyncio.subprocess.PIPE, env=env, cwd=str(tmp_path),
    )  # fmt: skip
    err = await finish(proc)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert any(e["event"] == "worker.drained" for e in events(err))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.worker_strategies:SlowNewestWins", "is the class SlowNewestWins"),
        ("tests.worker_strategies:returns_class", "gave the class NewestWins"),
    ],
)
async def test_a_strategy_class_is_a_usage_error(spec: str, message: str) -> None:
    """A class where an instance belongs: exit 2 and a message, never a worker calling
    `repair` on the class."""
    result = await asyncio.to_thread(
        run_cli, "worker", "--url", "redis://127.0.0.1:1", "--strategy", spec, timeout=60
    )
    assert result.returncode == 2, result.stderr.decode()[-2000:]
    assert message in result.stderr.decode()
    assert b"Traceback" not in result.stderr


async def test_cluster_flag_against_a_plain_server(stampede_primaries: LocalPrimaries) -> None:
    """`--cluster` with a plain server's URL: the server refuses the set-up, a runtime
    failure (exit 1) in one line saying to drop --cluster, no traceback."""
    result = await asyncio.to_thread(
        run_cli, "worker", "--cluster", "--url", stampede_primaries.urls[0],
        "--strategy", "newest-wins", timeout=60,
    )  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr[-2000:]
    assert stderr.startswith("error: ") and "drop --cluster" in stderr
    assert "Traceback" not in stderr and "Try " not in stderr


async def test_strategy_that_fails_to_start(stampede_primaries: LocalPrimaries) -> None:
    """An `on_startup` that raises: exit 1 with the strategy's error, no traceback."""
    result = await asyncio.to_thread(
        run_cli, "worker", *url_args(stampede_primaries), "--strategy",
        "tests.worker_strategies:fails_to_start", "--stream", "startup-fails", timeout=60,
    )  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr[-2000:]
    assert "failed to start" in stderr and "the database refused the pool" in stderr
    assert "Traceback" not in stderr


# --- --processes N ------------------------------------------------------------------

BARRIER = '''
import asyncio, os
from pathlib import Path
from stampede.repair import NewestWins

HERE = Path(__file__).parent


class Barrier(NewestWins):
    """NewestWins that holds its first job until two processes have each claimed one:
    proof that both children of `--processes 2` take jobs, whatever the machine's speed."""

    name = "barrier"

    async def repair(self, ctx, obs, verdict):
        (HERE / f"claimed-{os.getpid()}").touch()
        for _ in range(2400):
            if len(list(HERE.glob("claimed-*"))) >= 2:
                break
            await asyncio.sleep(0.05)
        return await super().repair(ctx, obs, verdict)


def make():
    return Barrier()
'''


async def read_events(
    stream: asyncio.StreamReader, seen: list[dict[str, Any]], until: Any, *, within: float = 120
) -> dict[str, Any]:
    """Read JSON log lines into `seen` until one satisfies `until`; that event."""

    async def scan() -> dict[str, Any]:
        while True:
            line = await stream.readline()
            assert line, f"the log ended first: {seen[-10:]}"
            if line.startswith(b"{"):
                record: dict[str, Any] = json.loads(line)
                seen.append(record)
                if until(record):
                    return record

    return await asyncio.wait_for(scan(), timeout=within)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_processes_n_supervises_workers(
    stampede_primaries: LocalPrimaries, tmp_path: Path
) -> None:
    """`--processes 2`: two children both claim jobs, a SIGKILLed child is restarted,
    and SIGTERM to the supervisor stops every child and exits 0."""
    (tmp_path / "barrier.py").write_text(BARRIER)
    async with open_stampede(stampede_primaries, "shards") as st:
        queue = RepairQueue(st.topology, name="processes")
        await queue.clear()
        await plant(st, queue, 12)
        proc = await spawn(
            "worker", *url_args(stampede_primaries), "--strategy", "barrier:make",
            "--stream", "processes", "--processes", "2", "--concurrency", "1",
            "--job-timeout", "0", "--min-idle", "1",
            cwd=str(tmp_path),
        )  # fmt: skip
        assert proc.stderr is not None
        seen: list[dict[str, Any]] = []
        try:
            await eventually(lambda: drained(queue), within=120)
            claimed = await asyncio.to_thread(lambda: list(tmp_path.glob("claimed-*")))
            assert len(claimed) == 2  # both children took jobs
            first = [e for e in seen if e["event"] == "supervisor.child_started"]
            while len(first) < 2:
                first.append(
                    await read_events(
                        proc.stderr, seen, lambda e: e["event"] == "supervisor.child_started"
                    )
                )
            victim = next(e["pid"] for e in first if e["child"] == 0)
            os.kill(victim, signal.SIGKILL)
            again = await read_events(
                proc.stderr,
                seen,
                lambda e: e["event"] == "supervisor.child_started" and e["child"] == 0,
            )
            assert any(e["event"] == "supervisor.restarting" for e in seen)
            children = [next(e["pid"] for e in first if e["child"] == 1), again["pid"]]
        finally:
            proc.send_signal(signal.SIGTERM)
            rest = await finish(proc, within=120)
        assert proc.returncode == 0, rest.decode()[-3000:]
        assert all(gone(pid) for pid in children), children
        log = seen + events(rest)
        stopped = [e for e in log if e["event"] == "supervisor.stopped"]
        assert stopped and stopped[0]["exit_code"] == 0, stopped
        assert b"Traceback" not in rest


async def test_the_children_of_a_killed_supervisor_stop(
    stampede_primaries: LocalPrimaries,
) -> None:
    """`--processes 2` whose supervisor is killed outright (SIGKILL, the OOM killer):
    its children, in sessions of their own, ran on unmanaged for good (and beside the
    children of a supervisor started again). Each now stops as on SIGTERM, logging
    `worker.orphaned`; the log's pipe then ends, every child gone."""
    proc = await spawn(
        "worker", *url_args(stampede_primaries), "--strategy", "newest-wins",
        "--stream", "orphans", "--processes", "2",
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[dict[str, Any]] = []
    children: list[int] = []
    try:
        while len(children) < 2:
            started = await read_events(
                proc.stderr, seen, lambda e: e["event"] == "supervisor.child_started"
            )
            children.append(started["pid"])
        for _ in children:
            await read_events(proc.stderr, seen, lambda e: e["event"] == "worker.start")
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        rest = await finish(proc, within=120)  # the pipe ends once every child is gone
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    log = seen + events(rest)
    orphaned = [e for e in log if e["event"] == "worker.orphaned"]
    assert len(orphaned) == 2 and {e["supervisor"] for e in orphaned} == {proc.pid}, orphaned
    assert [e["event"] for e in log].count("worker.stop") == 2, log[-6:]
    assert b"Traceback" not in rest


async def test_processes_metrics_ports_past_65535_are_a_usage_error() -> None:
    """`--processes 2 --metrics-port 65535`: child 1 would serve on 65536. Exit 2 with one
    message naming the options, before any child starts (a child raised OverflowError,
    printed a traceback and was restarted forever)."""
    result = await asyncio.to_thread(
        run_cli, "worker", "--url", "redis://127.0.0.1:1", "--strategy", "newest-wins",
        "--processes", "2", "--metrics-port", "65535", timeout=60,
    )  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr[-2000:]
    assert "--metrics-port" in stderr and "65535" in stderr
    assert "Traceback" not in stderr and "supervisor.started" not in stderr


async def test_ctrl_c_while_the_children_start_stops_the_supervisor_cleanly() -> None:
    """SIGINT to `--processes 2` while both children are still connecting (no server
    answers yet): each child stops (exit 130, interrupted), and the supervisor exits 0,
    "stopped cleanly (a signal)"; it exited 1 as if a child had failed."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await spawn(
        "worker", "--url", f"redis://127.0.0.1:{port}", "--strategy", "newest-wins",
        "--processes", "2", "--connect-attempts", "1000",
    )  # fmt: skip
    assert proc.stderr is not None
    connecting = 0
    while connecting < 2:  # both children have tried once, and are waiting to retry
        line = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
        assert line, "the supervisor ended before its children tried to connect"
        connecting += b'"worker.connect_failed"' in line and b'"attempt": 1,' in line
    proc.send_signal(signal.SIGINT)
    rest = await finish(proc)
    assert proc.returncode == 0, rest.decode()[-2000:]
    stopped = [json.loads(x) for x in rest.splitlines() if b"supervisor.stopped" in x]
    assert stopped and stopped[0]["exit_code"] == 0, stopped
    assert b"Traceback" not in rest
