"""`Sent`: the first attempt of a lane's pipeline, written without a task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._resp import Connection

__all__ = ["Sent"]

_ANSWERS = frozenset({list, int, bytes, type(None)})
"""Reply types no error reply hides in (`Sent.plain` scans for them in C first)."""


def _spent(sent: Sent) -> None:
    """A `Sent`'s callback once it has run: its caller's own (a closure over what
    holds this `Sent`) is let go, so that no reference cycle outlives the answer
    (the cyclic garbage collector's work: a fifth of a transaction's CPU at 64 in
    flight, docs/performance.md)."""


class Sent:
    """The first attempt of a pipeline, written by `Lane.send_now`: its commands, its
    connection and, once answered, `result` (the replies, or the `ConnectionLost` /
    `ReplyTimeout` that ended the connection). `Lane.pipeline(first=...)` takes it
    once, for the same commands."""

    __slots__ = ("_then", "commands", "conn", "fresh", "result")

    def __init__(
        self, commands: Sequence[Sequence[Any]], conn: Connection, then: Callable[[Sent], None]
    ) -> None:
        self.commands = commands
        self.conn = conn
        self._then = then
        self.result: Any = None
        self.fresh = True
        """Not yet taken by `Lane.pipeline` as its first attempt."""

    def __call__(self, result: Any) -> None:
        self.result = result
        then, self._then = self._then, _spent  # once; and no cycle through its caller
        then(self)

    def plain(self) -> list[Any] | None:
        """The replies, when the attempt got through with no error reply; else None."""
        result = self.result
        if isinstance(result, BaseException) or not (
            _ANSWERS.issuperset(map(type, result))  # (one scan in C, the usual case)
            or not any(isinstance(r, BaseException) for r in result)
        ):
            return None
        replies: list[Any] = result
        return replies
