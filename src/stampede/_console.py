"""The `stampede` console script: the command line, or how to install it.

The command line needs click and rich, which the library does not: they come
with the `cli` extra (`pip install 'stampede-redis[cli]'`). Without them the
script says so instead of failing with an ImportError.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

MISSING = (
    "The stampede command line needs the 'cli' extra ({missing} is not installed).\n"
    "Install it with:  pip install 'stampede-redis[cli]'\n"
)


def main() -> None:
    """Run `stampede.cli.main`, or explain how to install what it needs."""
    try:
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(MISSING.format(missing=exc.name or "click or rich"))
        sys.exit(1)
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:  # Ctrl-C while the command line loads
        sys.stderr.write("stampede: interrupted\n")
        sys.exit(130)  # as `stampede.cli.EXIT_INTERRUPTED`, which is not loaded yet
    cli_main()
