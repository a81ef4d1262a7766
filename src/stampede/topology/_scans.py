"""SCAN cursors and the server process that gave each: a cursor is good only there.

A SCAN cursor is a position in one server process's hash table. Another process
orders its keys otherwise: the same server restarted (its table rebuilt under a
new hash seed), another server behind the same name (a DNS move) or address, a
replica promoted in a failover. Going on there with the old cursor skips keys
without a word. So every SCAN page that `execute_on` runs goes in one pipeline
behind `INFO server`, on one connection, and the cursor it hands out is
remembered with the `run_id` of the process that answered (a new one at every
start). A page asked with a remembered cursor of another process raises
`ShardUnavailable` ("start the scan of this shard again"), whatever the topology:
independent primaries, Sentinel, a cluster. A cursor this client did not hand out
(another client's, or one forgotten: the newest `CURSORS` are kept) goes on
unchecked, as does a server that does not say its `run_id` (`INFO` refused).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ShardUnavailable
from ._checks import fields
from ._lane import Lane

__all__ = ["CURSORS", "Page", "ScanCursors", "is_scan", "scan_page"]

Page = tuple[str | None, Any]
"""(run_id of the process that answered, or None, the SCAN reply)."""

CURSORS = 4096
"""SCAN cursors remembered (with the process that gave each) across the shards."""


def is_scan(args: Sequence[Any]) -> bool:
    """Whether `args` is a SCAN with a cursor (`SCAN <cursor> ...`)."""
    return len(args) >= 2 and _text(args[0]).upper() == "SCAN"


async def scan_page(lane: Lane, args: Sequence[Any]) -> Page:
    """(run_id of the process that answered, or None, the SCAN reply) from one
    pipeline on one connection of `lane`; the SCAN's error reply raises."""
    info, reply = await lane.pipeline([("INFO", "server"), tuple(args)], resend=True)
    if isinstance(reply, BaseException):
        raise reply
    run_id = None if isinstance(info, BaseException) else fields(info).get("run_id")
    return run_id or None, reply


class ScanCursors:
    """The cursors one topology handed out, by (shard, cursor): who gave each."""

    def __init__(self) -> None:
        self._origins: dict[tuple[str, bytes], str | None] = {}

    def checked(self, shard: str, args: Sequence[Any], page: Page) -> Any:
        """The reply of `page`, what `scan_page` got for the SCAN `args` on `shard`;
        `ShardUnavailable` when its cursor came from another process than the one
        that answered now. The cursor it hands out is remembered."""
        run_id, reply = page
        origin = self._origins.get((shard, _cursor(args[1])))  # (kept: scans may share it)
        if origin is not None and run_id != origin:
            raise ShardUnavailable(
                f"another server process answers for it than the one that began its scan "
                f"(it restarted, failed over, or its name leads elsewhere: run_id {origin} "
                f"then, {run_id} now): a SCAN cursor means nothing there (keys would be "
                "skipped); start the scan of this shard again",
                shard=shard,
            )
        if run_id is not None and isinstance(reply, list) and reply:
            cursor = _cursor(reply[0])
            if cursor != b"0":
                self._origins.pop((shard, cursor), None)  # (to the end: the newest)
                if len(self._origins) >= CURSORS:
                    del self._origins[next(iter(self._origins))]
                self._origins[(shard, cursor)] = run_id
        return reply


def _cursor(value: Any) -> bytes:
    """A SCAN cursor as bytes, however it was given or returned."""
    return value if isinstance(value, bytes) else str(value).encode()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
