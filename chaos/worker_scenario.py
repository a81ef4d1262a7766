"""The worker scenario: readers queue repairs, the worker process dies with jobs in hand.

Worker 1 (`python -m stampede.cli worker` with the recording strategy, as its own
process) is SIGKILLed once it has repaired a group and holds jobs; worker 2 takes
them over after `--min-idle`. Their histories (JSON lines of their own) are merged
into the run's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO

from stampede.repair._queue import RepairQueue
from stampede.repair._strategies import Enqueue
from stampede.scan import scan_groups
from stampede.verdict import Mode

from .env import Run
from .faults import EveryNth
from .history import load_events
from .workload import Workload, WorkloadConfig, plant_torn

__all__ = [
    "WORKER_STRATEGY",
    "drain",
    "repairs_done",
    "scan_and_enqueue",
    "start_worker",
    "stop_workers",
    "until",
    "worker_scenario",
]

WORKER_STRATEGY = "chaos.recording:worker_strategy"
_ROOT = str(Path(__file__).resolve().parents[1])  # the checkout, for PYTHONPATH


def _log(path: Path) -> IO[bytes]:
    return path.open("ab")


async def start_worker(
    run: Run,
    name: str,
    *,
    delay: float,
    strategy: str = WORKER_STRATEGY,
    env: dict[str, str] | None = None,
) -> asyncio.subprocess.Process:
    """`python -m stampede.cli worker` with a recording strategy, as its own process."""
    stem = run.history.path.stem if run.history.path is not None else run.env.kind
    history_path = run.workdir / f"{stem}.{name}.jsonl"
    history_path.unlink(missing_ok=True)  # a file of an earlier run would be appended to
    run.extra_histories.append(history_path)
    env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p),
        "STAMPEDE_CHAOS_HISTORY": str(history_path),
        "STAMPEDE_CHAOS_PROCESS": name,
        "STAMPEDE_CHAOS_REPAIR_DELAY": str(delay),
    }
    args = [*run.env.worker_args(), "--strategy", strategy, "--consumer", name]
    args += ["--concurrency", "2", "--min-idle", "1", "--max-attempts", "10"]
    args += ["--socket-timeout", "1", "--health-interval", "60"]
    with _log(run.workdir / f"{stem}.{name}.log") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "stampede.cli", "worker", *args, stderr=log, env=env
        )
    run.history.fault("worker-start", worker=name, pid=proc.pid)
    return proc


def repairs_done(path: Path) -> int:
    return sum(1 for e in load_events(path) if e["type"] == "ok" and e.get("f") == "repair")


async def until(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def worker_scenario(run: Run) -> None:
    """Readers queue repairs; worker 1 is SIGKILLed with jobs in hand; worker 2 finishes.

    Once writers leave the cold groups, each cold spread group gets a write that
    dies between shards, so the queue has work that nothing else will fix.
    """
    run.topology.plan = EveryNth(3)
    queue = RepairQueue(run.topology)
    await queue.clear()
    first = await start_worker(run, "worker1", delay=0.3)
    workers = [first]
    cold_after = run.timing.duration / 4
    cold_spread = [g for g in run.layout.groups if g in run.layout.cold and "{" not in g]

    async def busy() -> bool:
        done = repairs_done(run.extra_histories[0])
        return done >= 1 and (await queue.stats())["pending"] > 0

    async def fault() -> None:
        await asyncio.sleep(cold_after + 0.2)
        planted = await plant_torn(run.topology, run.layout, run.history, cold_spread, record=True)
        await until(busy, within=run.timing.duration * 2)
        in_hand = (await queue.stats())["pending"]
        first.send_signal(signal.SIGKILL)
        await first.wait()
        run.history.fault("worker-kill", worker="worker1", jobs_in_hand=in_hand)
        run.notes.append(
            f"{planted} cold groups left torn by a dying writer; "
            f"worker1 SIGKILLed with {in_hand} job(s) in hand"
        )
        workers.append(await start_worker(run, "worker2", delay=0.0))

    try:
        config = WorkloadConfig(repair=Enqueue(queue), cold_after=cold_after)
        workload = Workload(run.topology, run.layout, run.history, config)
        await workload.run(run.timing.duration, fault())
        queued = await scan_and_enqueue(run, queue)
        stats = await drain(run, queue)
        run.notes.append(
            f"scan enqueued {queued}; dead letters {stats['dead']}; "
            f"repairs by the workers: {sum(repairs_done(p) for p in run.extra_histories)}"
        )
    finally:
        await stop_workers(workers)
    for path in run.extra_histories:
        run.history.extend(load_events(path))


async def drain(run: Run, queue: RepairQueue) -> dict[str, int]:
    """Wait (up to 60 s) until the workers emptied the queue; its final stats."""

    async def drained() -> bool:
        stats = await queue.stats()
        return stats["length"] == 0 and stats["pending"] == 0

    if not await until(drained, within=60):
        run.notes.append("the queue did not drain within 60 s")
    return await queue.stats()


async def stop_workers(workers: Sequence[asyncio.subprocess.Process]) -> None:
    """SIGTERM each worker still running; SIGKILL one that takes over 30 s to stop."""
    for proc in workers:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def scan_and_enqueue(run: Run, queue: RepairQueue) -> int:
    """`stampede scan --enqueue`, in process: queue every group that stays torn."""
    queued = 0
    for mode, letter in ((Mode.COMMIT, "c"), (Mode.STAMP, "s")):
        report = await scan_groups(
            run.topology,
            rf"(?P<group>chaos:(?:{letter}\d+|\{{{letter}\d+\}})):k\d+",
            match="chaos:*",
            mode=mode,
        )
        for torn in report.torn:
            job = await queue.enqueue(
                torn.group, list(torn.keys), torn.seen, torn.reason.value, mode=mode.value
            )
            queued += job is not None
    return queued
