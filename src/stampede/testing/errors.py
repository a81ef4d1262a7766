"""Errors raised by the test harness, under stampede's one root.

```
StampedeError
└── HarnessError (RuntimeError)          the harness could not do what was asked
    ├── ServerStartError                 a redis-server did not come up; carries its log
    └── ClusterNotReadyError (TimeoutError)  the cluster did not converge in time
```
"""

from __future__ import annotations

from pathlib import Path

from stampede.errors import StampedeError

__all__ = ["ClusterNotReadyError", "HarnessError", "ServerStartError"]


class HarnessError(StampedeError, RuntimeError):
    """The test harness could not start, stop or reshape its Redis servers."""


class ServerStartError(HarnessError):
    """A redis-server process did not come up; the message ends with the tail of its log."""

    def __init__(
        self,
        message: str,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        log_tail: str = "",
    ) -> None:
        self.port = port
        self.log_path = log_path
        self.log_tail = log_tail
        if log_tail:
            where = f" ({log_path})" if log_path is not None else ""
            message = f"{message}\n--- last lines of the server log{where} ---\n{log_tail}"
        super().__init__(message)


class ClusterNotReadyError(HarnessError, TimeoutError):
    """The local cluster did not reach a healthy, agreed state before the deadline."""

    def __init__(self, message: str, *, problems: list[str]) -> None:
        self.problems = problems
        detail = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{message}\n{detail}" if problems else message)
