"""Output whose reader has gone (`stampede scan | head -1`), or that cannot be written.

Python ignores SIGPIPE, so a write to a pipe whose reader has exited raises
`BrokenPipeError` (rich's console exits with status 1 instead, and so does click):
status 1 is `scan`'s and `lint`'s "found something", so a closed pipe looked like
a finding. Here it stops the command quietly with `EXIT_OUTPUT_CLOSED`, 141
(128 + SIGPIPE, what a shell reports for a program that SIGPIPE killed), after
pointing stdout at /dev/null so that the interpreter's last flush cannot print
"Exception ignored ... BrokenPipeError" (the Python docs' advice, "Note on SIGPIPE").

Output that cannot be written for another reason (a full disk: `> /dev/full`, an
I/O error) printed a traceback; it is one line, `error: cannot write the output
(...)`, and `EXIT_OUTPUT_FAILED`, 74 (sysexits' EX_IOERR): the output is cut short,
and a finding's status (1) or success (0) would hide it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import sys
from collections.abc import Iterator
from typing import IO, Any, NoReturn

import click
from rich.console import Console

__all__ = [
    "EXIT_OUTPUT_CLOSED",
    "EXIT_OUTPUT_FAILED",
    "OutputClosed",
    "OutputFailed",
    "closed_output_exits",
    "console",
    "out",
]

EXIT_OUTPUT_CLOSED = 128 + signal.SIGPIPE
"""Exit status of a command whose output was closed by its reader (141 on Linux)."""
EXIT_OUTPUT_FAILED = 74
"""Exit status of a command whose output could not be written (sysexits' EX_IOERR)."""


class OutputClosed(Exception):
    """The reader of stdout (or stderr) has gone. Not an `OSError`: the commands'
    handlers of network errors must not take it for a server's."""


class OutputFailed(Exception):
    """stdout could not be written (not a closed pipe: a full disk, an I/O error)."""

    def __init__(self, exc: OSError | str) -> None:
        super().__init__(exc if isinstance(exc, str) else exc.strerror or str(exc))


_NO_STDOUT = "stdout is closed"
"""`>&-`: Python has no sys.stdout, and click.echo and rich print nothing, silently."""


class _Console(Console):
    """rich's console, but a closed pipe raises `OutputClosed` (rich would exit 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise OutputClosed


class _Written:
    """A text stream whose write errors are `OutputFailed` (a closed pipe stays a
    `BrokenPipeError`: rich and `closed_output_exits` know it)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with _failing():
            return self._stream.write(text)

    def flush(self) -> None:
        with _failing():
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...
        return getattr(self._stream, name)


@contextlib.contextmanager
def _failing() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise
        raise OutputFailed(exc) from None


def console(*, stderr: bool = False) -> Console:
    """A rich console on the current stdout (which click's test runner may swap), or
    stderr. Without markup: what it prints holds data (keys, stream names, errors),
    and a key named `user:[/]` raised rich's MarkupError (`[bold]`, a style); styles
    are given as `Text` styles instead."""
    if stderr:
        return _Console(highlight=False, markup=False, stderr=True)
    if sys.stdout is None:
        raise OutputFailed(_NO_STDOUT)
    stream = _Written(sys.stdout)
    return _Console(highlight=False, markup=False, file=stream)  # type: ignore[arg-type]


def out(text: str) -> None:
    """Print a line on stdout (`click.echo`); a write error is `OutputFailed`."""
    if sys.stdout is None:
        raise OutputFailed(_NO_STDOUT)
    with _failing():
        click.echo(text)


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
    except OutputFailed as exc:
        _failed(exc)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            if not _in_echo(exc):
                raise
            _failed(OutputFailed(exc))
        if not any(_broken(fd) for fd in _fds()):
            raise
        _stop()


def _in_echo(exc: BaseException) -> bool:
    """Whether `exc` was raised writing with `click.echo` (click's --help, say)."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "echo" and code.co_filename.endswith(os.path.join("click", "utils.py")):
            return True
        tb = tb.tb_next
    return False


def _failed(exc: OutputFailed) -> NoReturn:
    with contextlib.suppress(OSError, ValueError):
        click.echo(f"error: cannot write the output ({exc})", err=True)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        _to_devnull(sys.stdout.fileno())  # what is left unwritten fails no more
    raise SystemExit(EXIT_OUTPUT_FAILED)


def _fds() -> list[int]:
    fds = []
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fds.append(stream.fileno())
    return fds
