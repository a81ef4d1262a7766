"""The `stampede` command line (click + rich).

`main` is the click group behind the `stampede` console script. Each command
lives in the module of its topic and is registered below; to add one, write
`cli/<topic>.py` with a `@click.command()` and add it to `main` here. Shared
helpers (key input, display, JSON output) are in `cli/_common.py`.
"""

from __future__ import annotations

from typing import Any

import click

from .. import __version__
from .._startup import release
from ._demo_command import demo_command
from ._keyspace import keyslot_command, lint_command, slots_command
from ._output import EXIT_OUTPUT_CLOSED, EXIT_OUTPUT_FAILED, closed_output_exits
from ._queue import queue_command
from ._repair import worker_command
from ._scan import scan_command

__all__ = ["EXIT_INTERRUPTED", "EXIT_OUTPUT_CLOSED", "EXIT_OUTPUT_FAILED", "main"]

EXIT_INTERRUPTED = 130
"""Exit status of a command stopped by Ctrl-C (SIGINT): 128 + 2, as shells report it.
Not 1, which `scan` and `lint` give a finding (torn groups, broken rules)."""


class _Commands(click.Group):
    """The `stampede` group: Ctrl-C in any command ends it with one line and exit
    status 130, never a traceback nor click's "Aborted!" with status 1; output
    closed by its reader (`| head`) ends it quietly with status 141, never 1
    (`EXIT_OUTPUT_CLOSED`), in the command or in `--help`."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        with closed_output_exits():  # e.g. an error line on a closed stderr
            return super().main(*args, **kwargs)

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with closed_output_exits():  # --help and --version print while parsing
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            release()  # Ctrl-C is the command's now: KeyboardInterrupt, its clean-up, 130
            with closed_output_exits():
                return super().invoke(ctx)
        except KeyboardInterrupt:
            name = ctx.invoked_subcommand
            click.echo(f"stampede{f' {name}' if name else ''}: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="stampede")  # the distribution is stampede-redis
def main() -> None:
    """Keep related Redis keys consistent across shards.

    Key design: `keyslot` (where keys land), `lint` (hash tag mistakes),
    `slots` (how a key sample, or a live keyspace with --url, spreads over slots
    and shards).
    Repair: `scan` (find torn groups in live data), `worker` (drain the repair stream),
    `queue` (counts, dead letters, requeue).
    Demo: `demo` (local servers, injected faults, repairs, a summary).
    """


main.add_command(keyslot_command)
main.add_command(lint_command)
main.add_command(slots_command)
main.add_command(scan_command)
main.add_command(worker_command)
main.add_command(queue_command)
main.add_command(demo_command)
