"""The `ramp` scenario: read-atomic transactions under every fault at once.

100 integer keys over every shard; write transactions over random subsets of
3-8 of them, read transactions (`read_atomic`) over others, while

- in-process writers are cancelled at every step of both rounds in turn (before
  and after the first, second and third PREPARE call, then COMMIT call);
- writer processes (`python -m chaos.ramp_writer`) freeze at a chosen
  step, in turn every step of both rounds, and are SIGKILLed there;
- a primary is SIGSTOPped past the socket timeout and resumed;
- on the cluster, two slots holding workload keys migrate key by key (each
  data key and its version hash moved apart, so a slot is split for a while).

At the end one read transaction reads all 100 keys. `check_ramp` judges the
history (`ramp_checker`: the text export and nothing else), written next to the
JSON lines as `<history>.txt`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from stampede._client import Stampede
from stampede.keys import keyslot
from stampede.options import Options
from stampede.wire._txn import side_key

from .env import Run
from .faults import migrate_slot, pause_and_resume
from .history import load_events
from .ramp_checker import export_lines
from .ramp_workload import (
    KEYS,
    STEPS,
    RampSession,
    Step,
    StepPlan,
    StepTopology,
    key_name,
    pick_keys,
    read_loop,
    read_once,
    seed,
)
from .workload import CHAOS_CONNECTION

__all__ = ["RAMP_READERS", "ramp_scenario", "write_export"]

_ROOT = str(Path(__file__).resolve().parents[1])
RAMP_READERS = 4
IN_PROCESS_WRITERS = 3
PROCESS_LANES = 2


def write_export(history_path: Path, events: list[dict[str, object]]) -> Path:
    out = history_path.with_suffix(".txt")
    out.write_text("".join(line + "\n" for line in export_lines(events)), encoding="utf-8")
    return out


async def _writer(run: Run, st: Stampede, session: int, rng: random.Random, until: float,
                  steps: itertools.cycle[Step], tally: dict[str, int]) -> None:  # fmt: skip
    """Transactions until `until`; every third is cancelled at the next step."""
    writer = RampSession(st, run.history, session, f"w{session}")
    task = asyncio.current_task()
    assert task is not None

    async def cancel(at: Step) -> None:
        run.history.fault("crash", point=str(at), style="cancel", session=session)
        tally["cancelled"] += 1
        task.cancel()
        await asyncio.sleep(3600)  # cancelled with the writer's task

    n = 0
    while time.monotonic() < until:
        n += 1
        keys = pick_keys(rng)
        plan = None
        calls = writer.steps_of(keys)
        if n % 3 == 0:
            step = next(steps)
            if calls[step.phase]:
                plan = StepPlan(Step(step.phase, step.index % calls[step.phase], step.when), cancel)
        try:
            outcome = await writer.transact(keys, plan)
        except asyncio.CancelledError:
            if task.cancelling() == 0:
                raise
            task.uncancel()  # our own cancel: the writer carries on with the next one
            continue
        tally[outcome] = tally.get(outcome, 0) + 1
        if outcome != "ok":
            await asyncio.sleep(0.02)


async def _process_lane(run: Run, lane: int, until: float, sessions: itertools.count[int],
                        steps: Iterator[Step], tally: dict[str, int],
                        extra: Sequence[str] = ()) -> None:  # fmt: skip
    """Writer processes one after another, each SIGKILLed at its step (`extra`: more
    arguments for `chaos.ramp_writer`)."""
    stem = run.history.path.stem if run.history.path is not None else run.env.kind
    while time.monotonic() < until:
        session = next(sessions)
        step = next(steps)
        name = f"ramp-writer{session}"
        path = run.workdir / f"{stem}.{name}.jsonl"
        path.unlink(missing_ok=True)
        run.extra_histories.append(path)
        args = [sys.executable, "-m", "chaos.ramp_writer", *run.env.worker_args()]
        args += ["--history", str(path), "--session", str(session), "--seed", str(session)]
        args += ["--stop-at", str(1 + session % 4), "--step", str(step), *extra]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p),
        }
        with (run.workdir / f"{stem}.{name}.log").open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *args, stdout=asyncio.subprocess.PIPE, stderr=log, env=env
            )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
        except TimeoutError:
            line = b""
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
        killed = line.strip() == b"PAUSED"
        run.history.fault(
            "worker-kill" if killed else "worker-exit", worker=name, step=str(step),
            session=session, returncode=proc.returncode,
        )  # fmt: skip
        tally["killed" if killed else "exited"] += 1


async def ramp_scenario(run: Run) -> None:
    """The workload, its faults, and a last read of every key (see the module notes)."""
    seed_value = zlib.crc32(str(run.history.path or run.env.kind).encode())
    rng = random.Random(seed_value)
    real = run.topology
    shards = {real.shard_of(key_name(k)) for k in range(KEYS)}
    if shards != set(real.shard_names):
        raise RuntimeError("the ramp keys do not cover every shard")
    options = Options(connection=CHAOS_CONNECTION)
    st = Stampede(real, options=options)
    stepping = Stampede(StepTopology(real.inner), options=options)
    await seed(st, run.history)
    duration = run.timing.duration * 2
    started = time.monotonic()
    until = started + duration
    tally: dict[str, int] = {"cancelled": 0, "killed": 0, "exited": 0}
    offset = seed_value % len(STEPS)
    steps_in = itertools.cycle(STEPS[offset:] + STEPS[:offset])
    steps_out = itertools.cycle(STEPS[offset:] + STEPS[:offset])
    sessions = itertools.count(100)

    async def pause() -> None:
        await asyncio.sleep(duration / 3)
        shard = run.topology.shard_names[1]
        await pause_and_resume(
            run.env.node(shard), run.history, shard=shard, paused=run.timing.pause,
            cluster=run.env.cluster,
        )  # fmt: skip
        run.notes.append(f"paused {shard} for {run.timing.pause:g} s")

    async def migrate() -> None:
        cluster = run.env.cluster
        if cluster is None:
            return
        moved = []
        # one slot before the pause, one after it (the harness needs every node up)
        for k, at in ((rng.randrange(KEYS), 0.05), (rng.randrange(KEYS), 0.62)):
            await asyncio.sleep(max(0.0, started + duration * at - time.monotonic()))
            data = key_name(k)
            slot = keyslot(data)
            source = cluster.master_for_slot(slot)
            target = next(m for m in cluster.masters if m is not source)
            # the data key first, its version hash a step later: the slot is split
            keys = [data, side_key(data, real.slot_of)]
            seconds = await migrate_slot(
                cluster, run.history, slot=slot, target=target, keys=keys, step=duration / 24
            )
            moved.append(f"{slot} (key {k}, {seconds:.2f} s)")
        run.notes.append(f"slots migrated key by key: {', '.join(moved)}")

    writers = [
        _writer(run, stepping, 1 + i, random.Random(seed_value + i), until, steps_in, tally)
        for i in range(IN_PROCESS_WRITERS)
    ]
    lanes = [_process_lane(run, i, until, sessions, steps_out, tally) for i in range(PROCESS_LANES)]
    readers = [
        read_loop(st, run.history, 1000 + i, random.Random(seed_value * 7 + i), until)
        for i in range(RAMP_READERS)
    ]
    await asyncio.gather(*writers, *lanes, *readers, pause(), migrate())
    await asyncio.to_thread(run.env.servers.heal)
    await read_once(st, run.history, 999, 1, list(range(KEYS)))  # every key, at the end
    for path in run.extra_histories:
        run.history.extend(load_events(path))
    events = run.history.events
    rounds = [e.get("rounds") for e in events if e.get("f") == "rread" and e["type"] == "ok"]
    two = sum(1 for r in rounds if r == 2)
    run.notes.append(
        f"{len(rounds)} read transactions ({two} in two rounds); writers cancelled "
        f"{tally['cancelled']} times, writer processes SIGKILLed {tally['killed']} times "
        f"(exited on their own {tally['exited']}); txns ok {tally.get('ok', 0)}, aborted "
        f"{tally.get('fail', 0)}, unknown {tally.get('unknown', 0)}"
    )
    if run.history.path is not None:
        out = write_export(run.history.path, events)
        run.notes.append(f"text history: {out}")
