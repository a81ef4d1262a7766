"""Output whose reader has gone: `stampede scan | head -1`.

Python ignores SIGPIPE, so a write to a pipe whose reader has exited raises
`BrokenPipeError` (rich's console exits with status 1 instead, and so does click):
status 1 is `scan`'s and `lint`'s "found something", so a closed pipe looked like
a finding. Here it stops the command quietly with `EXIT_OUTPUT_CLOSED`, 141
(128 + SIGPIPE, what a shell reports for a program that SIGPIPE killed), after
pointing stdout at /dev/null so that the interpreter's last flush cannot print
"Exception ignored ... BrokenPipeError" (the Python docs' advice, "Note on SIGPIPE").
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

from rich.console import Console

__all__ = ["EXIT_OUTPUT_CLOSED", "OutputClosed", "closed_output_exits", "console"]

EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE
"""Exit status of a command whose output was closed by its reader (141 on Linux)."""


class OutputClosed(Exception):
    """The reader of stdout (or stderr) has gone. Not an `OSError`: the commands'
    handlers of network errors must not take it for a server's."""


class _Console(Console):
    """rich's console, but a closed pipe raises `OutputClosed` (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise OutputClosed


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout (which click's test runner may swap), or
    stderr."""
    return _Console(highlight=False, stderr=stderr)


def _broken(fd: int) -> bool:
    """Whether `fd` is a pipe or socket whose reader has gone (poll says POLLERR)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # closed, or no poll (Windows)
        return False


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _stop() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if stream is sys.stdout or _broken(stream.fileno()):
                _to_devnull(stream.fileno())
    raise SystemExit(EXIT_OUTPUT_CLOSED)


@contextlib.contextmanager
def closed_output_exits() -> Iterator[None]:
    """Inside, output closed by its reader ends the command with `EXIT_OUTPUT_CLOSED`
    and no message (there is nobody to read one). A `BrokenPipeError` with neither
    stdout nor stderr broken is someone else's (a socket's) and goes on."""
    try:
        yield
    except OutputClosed:
        _stop()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        if not any(_broken(fd) for fd in _fds()):
            raise
        _stop()


def _fds() -> list[int]:
    fds = []
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fds.append(stream.fileno())
    return fds
