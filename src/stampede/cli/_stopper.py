"""How `stampede worker` stops on signals: the first SIGTERM or SIGINT stops it
gracefully (no new jobs; the jobs in hand get --grace to finish, exit 0); a second
Ctrl-C (SIGINT) while it waits stops it at once: the jobs still in hand are
handed back now, and the command exits 130, as an interrupted command does.

A log whose reader has gone (`stampede worker 2>&1 | head`) stops it as SIGTERM
does, then it exits 141 (128 + SIGPIPE, `EXIT_OUTPUT_CLOSED`): as a program SIGPIPE
ends, but with its jobs finished or handed back, not dropped mid-repair.

A child of `--processes` whose supervisor is gone (killed: SIGKILL, the OOM killer)
stops as on SIGTERM too, within a second, where it ran on unmanaged (in a session of
its own, no signal reached it) beside the workers of a supervisor started again."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from ..repair._worker import Worker
from ..repair._worker_record import event
from ._logs import LogHandler
from ._output import EXIT_OUTPUT_CLOSED

__all__ = ["PARENT_ENV", "Stopper"]

PARENT_ENV = "STAMPEDE_WORKER_PARENT"
"""Set in a supervised child's environment to its supervisor's pid (`_supervise`)."""
ORPHAN_CHECK = 1.0
"""Seconds between a supervised child's looks at whether its supervisor is alive."""


class Stopper:
    """The worker's signal handler (`loop.add_signal_handler(sig, stopper, sig)`)."""

    def __init__(self, worker: Worker, grace: float, log: LogHandler | None = None) -> None:
        self.worker = worker
        self.grace = grace
        self.stopping = False
        self.at_once = False
        """A second Ctrl-C came: the command exits 130 once the worker has stopped."""
        self.log = log
        if log is not None:
            log.on_closed = self.log_closed
            if log.closed:  # gone already, while the worker started
                self.log_closed()
        self.watch_supervisor()

    def watch_supervisor(self) -> None:
        """In a supervised child: stop as on SIGTERM once the supervisor is gone (this
        process has another parent then), looked at every `ORPHAN_CHECK` seconds."""
        parent = os.environ.get(PARENT_ENV, "")
        if not parent.isdigit():
            return
        loop = asyncio.get_running_loop()

        def check() -> None:
            if os.getppid() == int(parent):
                loop.call_later(ORPHAN_CHECK, check)
            elif not self.stopping:
                self.stopping = True
                event("worker.orphaned", logging.WARNING, supervisor=int(parent))
                self.worker.stop()

        check()

    def log_closed(self) -> None:
        """The log's reader has gone: stop as on SIGTERM (the exit status is 141)."""
        if not self.stopping:
            self.stopping = True
            self.worker.stop()

    def finish(self) -> None:
        """Once the worker has stopped: 130 after a second Ctrl-C, 141 once the log's
        reader has gone, else nothing (the command exits 0)."""
        if self.at_once:
            raise KeyboardInterrupt  # the group's `stampede worker: interrupted`, 130
        if self.log is not None and self.log.closed:
            raise SystemExit(EXIT_OUTPUT_CLOSED)

    def __call__(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if not self.stopping:
            self.stopping = True
            event("worker.stopping", signal=name, grace=self.grace)
            self.worker.stop()
        elif sig == signal.SIGINT and not self.at_once:
            self.at_once = True
            event(
                "worker.stopping_now",
                logging.WARNING,
                signal=name,
                in_hand=self.worker.stats.in_hand,
            )
            self.worker.stop(now=True)
