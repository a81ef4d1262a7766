"""How `stampede worker` stops on signals: the first SIGTERM or SIGINT stops it
gracefully (no new jobs; the jobs in hand get --grace to finish, exit 0); a second
Ctrl-C (SIGINT) while it waits stops it at once: the jobs still in hand are
handed back now, and the command exits 130, as an interrupted command does."""

from __future__ import annotations

import logging
import signal

from ..repair._worker import Worker
from ..repair._worker_record import event

__all__ = ["Stopper"]


class Stopper:
    """The worker's signal handler (`loop.add_signal_handler(sig, stopper, sig)`)."""

    def __init__(self, worker: Worker, grace: float) -> None:
        self.worker = worker
        self.grace = grace
        self.stopping = False
        self.at_once = False
        """A second Ctrl-C came: the command exits 130 once the worker has stopped."""

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
