"""The `stampede` console script: the command line, or how to install it.

The command line needs click and rich, which the library does not: they come
with the `cli` extra (`pip install 'stampede-redis[cli]'`). Without them the
script says so instead of failing with an ImportError.
"""

from __future__ import annotations

import sys

from ._startup import hold

__all__ = ["main"]

MISSING = (
    "The stampede command line needs the 'cli' extra ({missing} is not installed).\n"
    "Install it with:  pip install 'stampede-redis[cli]'\n"
)


def main() -> None:
    """Run `stampede.cli.main`, or explain how to install what it needs."""
    hold()  # Ctrl-C until a command runs: status 130, one line (`stampede._startup`)
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(MISSING.format(missing=exc.name or "click or rich"))
        sys.exit(1)
    from .cli import main as cli_main

    cli_main()
