"""Parameter types of the command line's own."""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["FiniteRange", "KeyFile", "from_env", "not_empty", "utf8_name"]


class FiniteRange(click.FloatRange):
    """`click.FloatRange` that also refuses `nan` and `inf`: click's range check passes
    a NaN (every comparison with it is false), and no option of stampede's means
    anything for either (a NaN timeout, delay or duration never ends, or breaks
    the arithmetic that schedules retries)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            problem = "nan and inf mean nothing here; give a plain number"
            self.fail(f"{value!r} is not a finite number ({problem})", param, ctx)
        return number


class KeyFile(click.File):
    """`click.File("rb")` whose '-' on a closed stdin (`stampede lint --file - <&-`)
    is a usage error: click raises a RuntimeError there, shown as a traceback."""

    def __init__(self) -> None:
        super().__init__("rb", lazy=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except RuntimeError:  # "Was not able to determine binary stream for sys.stdin."
            self.fail("stdin is closed; give a file, or keys as arguments", param, ctx)


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an empty value (`--stream ''`, `--match ''`): a quoting mistake that
    would otherwise fail after the work (an empty stream name) or quietly match
    nothing (a SCAN MATCH of '' walks every key and reports none)."""
    if value == "":
        raise click.BadParameter("is empty (a quoting mistake?); give a value or leave it out")
    return value


def from_env(name: str) -> dict[str, Any]:
    """click option settings that read the option from `$STAMPEDE_<name>` too."""
    return {"envvar": f"STAMPEDE_{name}", "show_envvar": True}


def utf8_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name stampede sends as text (`--stream`, `--consumer`): not empty, and UTF-8.
    Bytes that are not (the shell passes them as surrogate escapes) failed at the
    first command sent: `queue` with exit status 1 and advice for Python callers, a
    worker's every claim, for ever, even with --burst."""
    not_empty(ctx, param, value)
    if value is not None:
        try:
            value.encode()
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise click.BadParameter(
                f"'{shown}' is not UTF-8 text; give the name in UTF-8"
            ) from None
    return value
