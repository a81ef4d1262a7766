"""`python -m chaos.ramp_writer`: a writer process of the `ramp` scenario.

It writes transactions (one session, its own history file) and, at transaction
`--stop-at`, freezes the whole process at `--step` (say `after-prepare-1`: the
second PREPARE call has returned, nothing else of that transaction runs): it
records a `step` event, prints `PAUSED` on stdout and blocks, for the runner to
SIGKILL it there. With `--groups` each transaction writes every key of one or two
groups of `ramp_edge_workload.group_layout` (the `ramp-repair` scenario).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time

import click

from stampede._client import Stampede
from stampede.errors import SetupError
from stampede.options import Options
from stampede.topology._cluster import Cluster
from stampede.topology._shards import Shards

from .history import History
from .ramp_edge_workload import group_layout, pick_groups
from .ramp_workload import STEPS, RampSession, Step, StepPlan, StepTopology, pick_keys
from .workload import CHAOS_CONNECTION

__all__ = ["main"]


def _step(text: str) -> Step:
    for step in STEPS:
        if str(step) == text:
            return step
    raise click.BadParameter(f"unknown step {text!r}; one of {', '.join(map(str, STEPS))}")


async def _run(
    urls: list[str], cluster: bool, history: History, session: int, seed: int, stop_at: int,
    step: Step, txns: int, groups: bool = False,
) -> None:  # fmt: skip
    inner: Cluster | Shards
    if cluster:
        inner = Cluster(urls[0], options=CHAOS_CONNECTION)
    else:
        inner = Shards(urls, options=CHAOS_CONNECTION)
    topology = StepTopology(inner)
    st = Stampede(topology, options=Options(connection=CHAOS_CONNECTION))
    rng = random.Random(seed)

    async def freeze(at: Step) -> None:
        history.fault("step", step=str(at), session=session)
        sys.stdout.write("PAUSED\n")
        sys.stdout.flush()
        time.sleep(600)  # noqa: ASYNC251 - blocks the event loop: nothing else of this process runs

    for attempt in range(20):  # a primary may be paused right now
        try:
            await st.open()
            break
        except SetupError:
            if attempt == 19:
                raise
            await asyncio.sleep(0.25)
    try:
        writer = RampSession(st, history, session, f"p{session}")
        layout = group_layout(st.topology) if groups else ()
        for n in range(1, txns + 1):
            keys = pick_groups(rng, layout) if groups else pick_keys(rng)
            plan = None
            calls = writer.steps_of(keys)
            if n >= stop_at and calls[step.phase]:
                plan = StepPlan(Step(step.phase, step.index % calls[step.phase], step.when), freeze)
            await writer.transact(keys, plan)
    finally:
        await st.aclose()


@click.command()
@click.option("--url", "urls", multiple=True, required=True)
@click.option("--cluster", is_flag=True)
@click.option("--history", "history_path", required=True)
@click.option("--session", type=int, required=True)
@click.option("--seed", type=int, default=0)
@click.option("--stop-at", type=int, default=3, help="The transaction to stop at (or after).")
@click.option("--step", "step_text", default="before-commit-0")
@click.option("--txns", type=int, default=40, help="Transactions to write at most.")
@click.option("--groups", is_flag=True, help="Write whole groups (ramp-repair).")
def main(
    urls: tuple[str, ...], cluster: bool, history_path: str, session: int, seed: int,
    stop_at: int, step_text: str, txns: int, groups: bool,
) -> None:  # fmt: skip
    """A recorded writer process, frozen at one step for the runner to kill."""
    history = History(history_path)
    step = _step(step_text)
    try:
        asyncio.run(_run(list(urls), cluster, history, session, seed, stop_at, step, txns, groups))
    finally:
        history.close()


if __name__ == "__main__":
    main()
