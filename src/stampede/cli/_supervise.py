"""`stampede worker --processes N`: N worker processes under one supervisor.

One worker is one event loop, CPU-bound past a concurrency of about 4; more
processes scale it out on one host. The supervisor runs `stampede worker` again N
times with the same arguments (each child knows its index from `$STAMPEDE_WORKER_CHILD`,
so it does not supervise in turn), and:

- forwards SIGTERM and SIGINT to every child (each finishes its jobs in hand within
  --grace, as a single worker does); the children run in their own session, so a
  Ctrl-C on the terminal reaches them once, through the supervisor; a second Ctrl-C
  reaches them too (they hand their jobs back at once), and the supervisor exits 130;
- restarts a child that exits with an error or is killed, after a backoff (1 s,
  doubling up to 30 s; reset once a child has run a minute);
- stops every child and exits with the same status when one exits 2 (bad usage),
  3 (no server answered at start) or 141 (the log's reader gone): restarting would
  not help;
- exits once every child has exited: 0 when they all stopped cleanly (SIGTERM, or
  --burst with the queue drained).

A child whose supervisor is gone (killed outright) stops as on SIGTERM within a
second (`$STAMPEDE_WORKER_PARENT`, `_stopper.Stopper.watch_supervisor`).

Child i serves its metrics on --metrics-port + i (0: each any free port) and, with
--consumer NAME, is consumer NAME-i (the default, host-pid, is distinct already).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import click

from ..repair._worker_record import event
from ._stopper import PARENT_ENV

__all__ = ["CHILD_ENV", "FATAL", "supervise"]

CHILD_ENV = "STAMPEDE_WORKER_CHILD"
"""Set in each child's environment to its index (0, 1, ...)."""
FATAL = frozenset({2, 3, 141})
"""Child exit statuses that stop the supervisor: bad usage, no server at start, the
log's reader gone (the children share it: a restarted one would find it gone)."""
RESTART_BASE = 1.0
RESTART_CAP = 30.0
HEALTHY_AFTER = 60.0
"""Seconds a child must run for its restart backoff to start again from the base."""


def child_command(argv: list[str]) -> list[str]:
    """The command line of a child: `python -m stampede worker <the same arguments>`."""
    try:
        start = argv.index("worker")
    except ValueError:
        raise click.UsageError(
            "--processes works from the command line (stampede worker ...)"
        ) from None
    return [sys.executable, "-m", "stampede", *argv[start:]]


def supervise(processes: int) -> int:
    """Run `processes` workers until they have all exited; the exit status to use."""
    return asyncio.run(Supervisor(child_command(sys.argv[1:]), processes).run())


class Supervisor:
    """Keeps `processes` children of `command` running (see the module docstring)."""

    def __init__(self, command: list[str], processes: int) -> None:
        self.command = command
        self.processes = processes
        self.children: dict[int, asyncio.subprocess.Process] = {}
        self.signal = signal.SIGTERM
        self.fatal: int | None = None
        self.at_once = False  # a second Ctrl-C: exit 130 once the children are gone

    async def run(self) -> int:
        self.stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, sig)
        event("supervisor.started", processes=self.processes, pid=os.getpid())
        codes = await asyncio.gather(*(self.keep(i) for i in range(self.processes)))
        code = self.fatal if self.fatal is not None else (0 if not any(codes) else 1)
        if self.at_once and self.fatal is None:
            code = 128 + signal.SIGINT  # as an interrupted command (EXIT_INTERRUPTED)
        event("supervisor.stopped", exit_codes=list(codes), exit_code=code)
        return code

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop: forward `sig` to every running child and restart none."""
        if sig == signal.SIGINT and self.stopping.is_set():
            self.at_once = True
        self.signal = signal.Signals(sig)
        self.stopping.set()
        for proc in self.children.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    async def keep(self, index: int) -> int:
        """Run child `index`, restarting it after a crash; its last exit status."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            started = loop.time()
            env = {**os.environ, CHILD_ENV: str(index), PARENT_ENV: str(os.getpid())}
            proc = await asyncio.create_subprocess_exec(
                *self.command, env=env, start_new_session=True
            )
            self.children[index] = proc
            if self.stopping.is_set():  # the signal came while it was starting
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(self.signal)
            event("supervisor.child_started", child=index, pid=proc.pid)
            code = await proc.wait()
            level = logging.INFO if code == 0 else logging.WARNING
            event("supervisor.child_exited", level, child=index, pid=proc.pid, exit_code=code)
            if self.stopping.is_set() and code in (-self.signal, 128 + self.signal):
                return 0  # stopped by the signal forwarded while it started: held nothing
            if self.stopping.is_set() or code == 0:
                return code
            if code in FATAL:
                self.fatal = code
                self.stop(signal.SIGTERM)
                return code
            if loop.time() - started >= HEALTHY_AFTER:
                failures = 0
            delay = min(RESTART_CAP, RESTART_BASE * 2**failures)
            failures += 1
            event("supervisor.restarting", logging.WARNING, child=index, delay=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=delay)
            if self.stopping.is_set():
                return 0  # stopped while waiting to restart: nothing left running
