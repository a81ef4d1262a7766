"""What a `Cluster` sends to one node for a batch of reads or guarded writes.

Reads: one script call reading keys of many slots (Redis 7's `allow-cross-slot-keys`
flag); a node that refuses it (a slot moving, or a server before 7.0) gets one GET
per key, each following its own redirection. Writes: one cross-slot guarded call
for the batch, else one call per slot; the keys of a slot that is migrating go
again one write at a time, following ASK and TRYAGAIN.

`NodeReads` and `NodeWrites` are each node's batch functions and their `Quick`s:
`start` writes the first pipeline the batch function would (when it is one
command, on a connection at hand), `finish` takes its answer when it is the plain
success, and anything else (a redirection, a refusal, a lost reply) goes on from
that answer through the batch function (`first`), as it would have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._lua import script
from ._base import translate
from ._guard import (
    CROSS_SLOT_GUARD,
    GUARD,
    WriteRequest,
    argv_at,
    joined,
    split_codes,
    unknown_if_resent,
)
from ._lane import Sent
from ._node_ops import eval_fallback
from ._resp import ReplyError
from ._retries import watch_losses
from ._router import Router, failing, redirected

__all__ = ["NodeIO", "NodeReads", "NodeWrites"]

_READ = script("cluster_read")
"""GET of keys of many slots on one node (keys in ARGV: the node checks each GET)."""


def _first_key(command: tuple[Any, ...]) -> bytes:
    """The first declared key of an EVAL/EVALSHA (where a redirection is looked up)."""
    return bytes(command[3]) if int(command[2]) > 0 else bytes(command[4])


def _wrong_type(reply: Any) -> bool:
    """A GET's WRONGTYPE reply: the key holds another type (read as missing)."""
    return isinstance(reply, ReplyError) and reply.code == "WRONGTYPE"


def _refuses_flags(reply: BaseException) -> bool:
    """True when a node answered a cross-slot script with an error that says it cannot
    run one at all: a server before 7.0 fails to compile the script's flags line, or
    the user may not run scripts (`NOPERM`: a reader's ACL). Anything else (a slot
    moving, a redirection, a failed connection, `OOM`, `BUSY`, a key of another
    type) passes, and the next batch tries the script again."""
    if not isinstance(reply, ReplyError) or redirected(reply) or failing(reply):
        return False
    text = str(reply)
    return "compiling script" in text or "shebang" in text or reply.code == "NOPERM"


class NodeIO:
    """Batched reads and guarded writes on the nodes of one cluster."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._no_read_script: set[str] = set()
        self._no_write_script: set[str] = set()

    def read_commands(self, node: str, keys: list[bytes]) -> list[tuple[Any, ...]]:
        """The first pipeline `_read_many` sends for `keys` to `node`."""
        if len(keys) > 1 and node not in self._no_read_script:
            return [("EVALSHA", _READ.sha, 0, *keys)]
        return [("GET", k) for k in keys]

    async def get_batch(
        self, node: str, requests: list[list[bytes]], first: Sent | None = None
    ) -> list[Any]:
        flat = [key for keys in requests for key in keys]
        results = await self._read_many(node, flat, first)
        out: list[Any] = []
        pos = 0
        for keys in requests:
            mine = results[pos : pos + len(keys)]
            pos += len(keys)
            error = next((r for r in mine if isinstance(r, BaseException)), None)
            out.append(mine if error is None else translate(error, node))
        return out

    async def _read_many(
        self, node: str, keys: list[bytes], first: Sent | None = None
    ) -> list[Any]:
        """Values of `keys` from `node`: one script call when the node serves them all.

        The script reads keys of many slots at once (Redis 7's allow-cross-slot-keys
        flag). While a slot migrates or after it moved, the node refuses a key it
        does not serve ("non local key") and the keys are read with one GET each,
        which follow ASK and MOVED one by one; a server without script flags (before
        7.0) always gets the GETs. `first`: the first pipeline's attempt, already made.
        """
        if first is None:
            commands = self.read_commands(node, keys)
        else:
            commands = [tuple(c) for c in first.commands]
        if commands[0][0] == "EVALSHA":
            run = self.router.runner(node, keys[:1], follow=False, first=first)
            (reply,) = await eval_fallback(run, commands)
            if not isinstance(reply, BaseException):
                return list(reply)
            if _refuses_flags(reply):
                self._no_read_script.add(node)  # e.g. Redis 6: no script flags
            commands = [("GET", k) for k in keys]
        replies = await self.router.pipeline(node, commands, keys, first=first)
        # a key of another type reads as missing, as MGET (and the script) answer it
        return [None if _wrong_type(r) else r for r in replies]

    def write_command(self, node: str, requests: list[WriteRequest]) -> tuple[Any, ...] | None:
        """The one guarded call `write_batch` starts with for `requests` on `node` (None
        when it starts with one call per slot)."""
        keys, argv, slots = joined(requests)
        if slots.count(slots[0]) == len(slots):
            return ("EVALSHA", GUARD.sha, len(keys), *keys, *argv)
        if node not in self._no_write_script:
            return ("EVALSHA", CROSS_SLOT_GUARD.sha, 0, len(keys), *keys, *argv)
        return None

    async def write_batch(
        self, node: str, requests: list[WriteRequest], first: Sent | None = None
    ) -> list[Any]:
        """One guarded-script call for every write of this loop turn on `node`.

        Keys of several slots go in one cross-slot call; a node that refuses it (a
        slot moving, or a server before 7.0) gets one call per slot instead.
        `first`: the attempt of the call `write_command` names, already made.
        """
        keys, argv, slots = joined(requests)
        if slots.count(slots[0]) == len(slots):
            groups = [list(range(len(keys)))]
        else:
            if first is not None or node not in self._no_write_script:
                whole = await self._guard_node(node, keys, argv, first)
                if whole is not None:
                    return split_codes(requests, whole, node)
            by_slot: dict[int, list[int]] = {}
            for i, slot in enumerate(slots):
                by_slot.setdefault(slot, []).append(i)
            groups = list(by_slot.values())
        results = await self._guard_calls(node, requests, groups, follow=False, first=first)
        if len(results) == 1 and not isinstance(results[0], BaseException):
            return split_codes(requests, results[0], node)
        if any(redirected(r) for r in results):
            groups, results = await self._settle_moving(node, requests, groups, results)
        codes: list[Any] = [None] * len(keys)
        for group, res in zip(groups, results, strict=True):
            if isinstance(res, BaseException):
                error = translate(res, node)
                for i in group:
                    codes[i] = error
            else:
                for i, code in zip(group, res, strict=True):
                    codes[i] = code
        return split_codes(requests, codes, node)

    async def _settle_moving(
        self,
        node: str,
        requests: list[WriteRequest],
        groups: list[list[int]],
        results: list[Any],
    ) -> tuple[list[list[int]], list[Any]]:
        """Resend redirected slots' keys one write at a time, following ASK and TRYAGAIN.

        A redirected slot is migrating: the keys of several writes in one call could
        be split between the two nodes (TRYAGAIN), while each write's own keys move
        together often enough to get through.
        """
        owner = [r for r, request in enumerate(requests) for _ in request.keys]
        moving = [g for g, r in zip(groups, results, strict=True) if redirected(r)]
        alone = [
            [i for i in g if owner[i] == r] for g in moving for r in sorted({owner[i] for i in g})
        ]
        settled = await self._guard_calls(node, requests, alone)
        kept = [(g, r) for g, r in zip(groups, results, strict=True) if not redirected(r)]
        return [g for g, _ in kept] + alone, [r for _, r in kept] + settled

    async def _guard_node(
        self, node: str, keys: list[bytes], argv: list[object], first: Sent | None = None
    ) -> list[Any] | None:
        """The whole batch in one cross-slot guard call; None when the node refuses it."""
        args = (len(keys), *keys, *argv)
        run = self.router.runner(node, keys[:1], follow=False, first=first)
        (reply,) = await eval_fallback(run, [("EVALSHA", CROSS_SLOT_GUARD.sha, 0, *args)])
        if not isinstance(reply, BaseException):
            return list(reply)
        if _refuses_flags(reply):
            self._no_write_script.add(node)  # e.g. Redis 6: no script flags
        return None

    async def _guard_calls(
        self,
        node: str,
        requests: list[WriteRequest],
        groups: list[list[int]],
        *,
        follow: bool = True,
        first: Sent | None = None,
    ) -> list[Any]:
        """One guarded-script call per group of key indexes into the batch's joined keys
        (each group in one slot)."""
        keys, argv, _ = joined(requests)

        def command(group: list[int]) -> tuple[Any, ...]:
            if len(group) == len(keys):
                return ("EVALSHA", GUARD.sha, len(keys), *keys, *argv)
            chosen = argv_at(requests, group)
            return ("EVALSHA", GUARD.sha, len(group), *[keys[i] for i in group], *chosen)

        commands = [command(g) for g in groups]

        async def run(batch: list[tuple[Any, ...]]) -> list[Any]:
            where = [_first_key(c) for c in batch]
            return await self.router.pipeline(node, batch, where, follow=follow, first=first)

        return await eval_fallback(run, commands)


def _split(requests: list[list[bytes]], values: list[Any]) -> list[Any]:
    out: list[Any] = []
    pos = 0
    for keys in requests:
        out.append(values[pos : pos + len(keys)])
        pos += len(keys)
    return out


class NodeReads:
    """The read batches of one cluster node (see the module)."""

    __slots__ = ("_io", "_node")

    def __init__(self, io: NodeIO, node: str) -> None:
        self._io = io
        self._node = node

    def start(self, requests: list[list[bytes]], then: Callable[[Sent], None]) -> bool:
        flat = [key for keys in requests for key in keys]
        commands = self._io.read_commands(self._node, flat)
        return self._io.router.lane_at(self._node).send_now(commands, then)

    def finish(self, requests: list[list[bytes]], answer: Sent) -> list[Any] | None:
        replies = answer.plain()
        if replies is None:
            return None
        if answer.commands[0][0] == "EVALSHA":
            replies = list(replies[0])
            if any(isinstance(r, BaseException) for r in replies):
                return None
        return _split(requests, replies)

    async def resume(self, requests: list[list[bytes]], answer: Sent) -> list[Any]:
        return await self.run(requests, answer)

    async def run(self, requests: list[list[bytes]], first: Sent | None = None) -> list[Any]:
        return await self._io.get_batch(self._node, requests, first)


class NodeWrites:
    """The guarded-write batches of one cluster node (see the module)."""

    __slots__ = ("_io", "_node")

    def __init__(self, io: NodeIO, node: str) -> None:
        self._io = io
        self._node = node

    def start(self, requests: list[WriteRequest], then: Callable[[Sent], None]) -> bool:
        command = self._io.write_command(self._node, requests)
        if command is None:
            return False
        return self._io.router.lane_at(self._node).send_now([command], then)

    def finish(self, requests: list[WriteRequest], answer: Sent) -> list[Any] | None:
        replies = answer.plain()
        return None if replies is None else split_codes(requests, list(replies[0]), self._node)

    async def resume(self, requests: list[WriteRequest], answer: Sent) -> list[Any]:
        return await self.run(requests, answer)

    async def run(self, requests: list[WriteRequest], first: Sent | None = None) -> list[Any]:
        with watch_losses() as lost:  # (a resend refused as expired: unknown)
            results: list[Any] = await self._io.write_batch(self._node, requests, first)
        return unknown_if_resent(results, self._node, lost.count)
