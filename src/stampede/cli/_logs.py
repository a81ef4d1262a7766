"""The command line's log output: the library logs through `logging`; the CLI formats.

`--log-format json` prints one JSON object per line (nothing before or after it):
`time` (UTC, ISO 8601), `level`, `logger`, then either the record's structured
fields (`event` and its `extra` fields, as the worker logs them) or `message`,
and `exc` with the traceback when there is one. `--log-format text` prints
`<time> <LEVEL> <logger> <message>`, where the worker's message is the event name
and its `key=value` fields.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["JsonFormatter", "LogHandler", "log_options", "setup_logging"]

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    "stampede_fields",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        out: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        names = getattr(record, "stampede_fields", None)
        extras = (
            {name: getattr(record, name) for name in names}
            if isinstance(names, tuple)
            else {k: v for k, v in vars(record).items() if k not in _STANDARD}
        )
        if hasattr(record, "event"):
            out["event"] = record.event
            extras.pop("event", None)
        else:
            out["message"] = record.getMessage()
        out.update(extras)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr's handler. When the log's reader has gone (`stampede worker 2>&1 | head`),
    it says so once (`closed`, then `on_closed()`) instead of printing "--- Logging
    error ---" on the same closed stream at every record; stderr then goes to
    /dev/null."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.closed = False
        self.on_closed: Callable[[], None] | None = None

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError) or error.errno != errno.EPIPE:
            super().handleError(record)
            return
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError, ValueError, AttributeError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stderr.fileno())
                os.close(devnull)
            if self.on_closed is not None:
                self.on_closed()


def setup_logging(level: str, fmt: str) -> LogHandler:
    """Route every `stampede.*` logger (and the root) to stderr in the chosen format."""
    handler = LogHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("stampede").setLevel(level.upper())
    logging.captureWarnings(True)
    return handler


F = TypeVar("F", bound=Callable[..., Any])


def log_options(default_level: str = "info") -> Callable[[F], F]:
    """`--log-level` and `--log-format` (env STAMPEDE_LOG_LEVEL, STAMPEDE_LOG_FORMAT)."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--log-format",
            type=click.Choice(["json", "text"]),
            default="json",
            show_default=True,
            envvar="STAMPEDE_LOG_FORMAT",
            show_envvar=True,
            help="json: one object per line (for log shippers); text: for people.",
        )(fn)
        fn = click.option(
            "--log-level",
            type=click.Choice(["debug", "info", "warning", "error"]),
            default=default_level,
            show_default=True,
            envvar="STAMPEDE_LOG_LEVEL",
            show_envvar=True,
            help="Level of the stampede.* loggers.",
        )(fn)
        return fn

    return decorate
