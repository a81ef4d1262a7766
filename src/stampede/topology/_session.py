"""`Session`: one lane connection held for several round trips (WATCH ... EXEC)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._resp import AuthError, Connection, ReplyError, is_auth_refusal

if TYPE_CHECKING:
    from ._lane import Lane

__all__ = ["Session", "check_auth"]


def check_auth(conn: Connection, replies: list[Any]) -> None:
    """NOAUTH / WRONGPASS: the server refused the connection's credentials unrun."""
    for reply in replies:
        if isinstance(reply, ReplyError) and is_auth_refusal(reply):
            conn.close()
            raise AuthError(str(reply))


class Session:
    """One lane connection held for several round trips; nothing in it is ever resent.

    Errors propagate as the transport's (a lost reply as `ConnectionLost` or
    `ReplyTimeout`): the caller knows what the exchange means. The connection goes
    back to the lane when the block ends cleanly, and is closed otherwise (it may
    still hold a WATCH or an open MULTI).
    """

    __slots__ = ("_conn", "_lane", "broken")

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._conn: Connection | None = None
        self.broken = False

    async def __aenter__(self) -> Session:
        self._conn = await self._lane.hold()
        return self

    async def __aexit__(self, exc_type: Any, *_: object) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            broken = exc_type is not None or self.broken
            self._lane.release(conn, broken=broken)

    @property
    def lane(self) -> Lane:
        return self._lane

    async def call(self, *args: Any) -> Any:
        """One command's raw reply; an error reply raises."""
        (reply,) = await self.pipeline([args])
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def pipeline(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Raw replies (error replies as `ReplyError` values), in order."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("a session is used inside `async with` only")
        try:
            replies = await conn.send(commands)
            check_auth(conn, replies)
        except BaseException:
            self.broken = True
            raise
        return replies
