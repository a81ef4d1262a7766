"""Ctrl-C while the `stampede` command loads: exit status 130 and one line, no traceback.

The console script (`stampede`, `python -m stampede`, `python -m stampede.cli`)
imports this package before any code of the command line runs, and the import
takes a moment (half a second on a busy machine): a Ctrl-C then printed a
traceback. The package imports this module first, and when the process is that
command starting (and SIGINT still has Python's default handler), `hold` makes
SIGINT end it at once with status 130 and `stampede: interrupted`. The command
line gives SIGINT back to Python (`release`) once a command runs, which then
handles Ctrl-C its own way (status 130 too, after its clean-up).

Nothing changes for a program that imports stampede as a library.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["hold", "release"]

EXIT_INTERRUPTED = 130
_COMMANDS = ("stampede", "stampede.cli")
"""The modules `python -m` runs as the command line."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    try:
        sys.stderr.write("stampede: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr, or a closed one
        pass
    raise SystemExit(EXIT_INTERRUPTED)


def _run_with_m() -> bool:
    """`python -m stampede` (or `stampede.cli`): runpy imports the package first."""
    argv = getattr(sys, "orig_argv", [])
    skip = False
    for i, arg in enumerate(argv[1:], 1):
        if skip:  # the value of -X or -W
            skip = False
        elif arg in ("-X", "-W", "--check-hash-based-pycs"):
            skip = True
        elif arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] in _COMMANDS
        elif arg.startswith("-m"):
            return arg[2:] in _COMMANDS
        elif arg == "-c" or not arg.startswith("-"):  # a script or -c: not -m
            return False
    return False


def _console_script() -> bool:
    """The `stampede` script that installers write (`from stampede._console import main`)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not isinstance(path, str) or os.path.basename(path) not in ("stampede", "stampede.py"):
        return False
    try:
        with open(path, "rb") as script:
            return b"stampede._console" in script.read(4096)
    except OSError:
        return False


def hold() -> None:
    """While the command line loads, SIGINT ends the process quietly with status 130
    (when SIGINT has Python's default handler: an application's own is left alone)."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    except ValueError:  # not the main thread
        pass


def release() -> None:
    """Give SIGINT back to Python (KeyboardInterrupt), if `hold` took it."""
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread
        pass


if _run_with_m() or _console_script():
    hold()
