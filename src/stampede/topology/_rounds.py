"""A round of script calls on several servers at once, without a task per server.

`script_round` writes every server's pipeline of EVALSHAs at once (`Lane.send_now`)
and wakes its caller once, when the last answer is in (`Fanin`), not once per
server through a task, a coroutine chain and a gather. A pipeline answered with
plain replies (no error reply, no lost reply) is done; anything else (a lost or
late reply, an error reply, NOSCRIPT, a redirection) goes on through `resume`,
the topology's own path for that pipeline, taking the answer as its first attempt
(`Lane.pipeline(first=...)`): nothing is sent again that the task path would not
send again. A pipeline that cannot be written now (no connection at hand) goes
through `resume` at once. A transaction's prepare and commit rounds use it
(`Shards.scripts`, `Cluster.scripts`).

Rounds of concurrent callers share writes: every pipeline bound for one server in
one event-loop turn is written at the end of that turn in one write, on one
connection (`_Cork`, held by the lane itself: a turn its loop never finishes goes
with the lane), each caller's commands a pipeline of its own there: each
caller gets its own commands' answers back, and keeps them when the connection is
lost after they came. At 64 transactions in flight that is one write, one reply
read and one connection's worth of bookkeeping per server per turn, where it was
one per transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._coalesce import Fanin
from ._lane import Lane, Sent
from ._resp import blocking

__all__ = ["Resume", "script_round"]

Resume = Callable[[int, Sent | None], Awaitable[list[Any]]]
"""Pipeline `i` by the topology's task path, `first` its attempt (None: not sent);
per command its result."""


async def script_round(
    lanes: Sequence[Lane], pipelines: Sequence[list[tuple[Any, ...]]], resume: Resume
) -> list[list[Any] | BaseException]:
    """Pipeline `i` on `lanes[i]`, all written at the end of this loop turn; per
    pipeline its plain replies, or what `resume` returned (or raised) for it (see the
    module). The pipelines resumed (not sent, or answered otherwise) run in tasks,
    concurrently, once every answer is in.
    """
    if not pipelines:
        return []
    fanin = Fanin(len(pipelines))
    for i, commands in enumerate(pipelines):
        _send_soon(lanes[i], commands, _to(fanin, i))
    answers: list[Sent | None] = await fanin.future
    out: list[Any] = [None] * len(answers)
    again: list[int] = []
    for i, answer in enumerate(answers):
        plain = None if answer is None else answer.plain()
        if plain is None:
            again.append(i)
        else:
            out[i] = plain
    if again:  # the others (not sent, or answered otherwise) resumed from their answer
        redone = await asyncio.gather(
            *(resume(i, answers[i]) for i in again), return_exceptions=True
        )
        for i, replies in zip(again, redone, strict=True):
            out[i] = replies
    return out


class _Cork:
    """The pipelines bound for one lane in this loop turn: written together when the
    turn ends (`flush`), in one write on one connection, each part a pipeline of its
    own there (`Lane.send_parts`): a part answered before the connection ends keeps
    its answer, and only the parts still waiting meet the loss."""

    __slots__ = ("lane", "loop", "parts")

    def __init__(self, lane: Lane, loop: asyncio.AbstractEventLoop) -> None:
        self.lane = lane
        self.loop = loop
        self.parts: list[tuple[list[tuple[Any, ...]], Callable[[Sent | None], None]]] = []

    def flush(self) -> None:
        if self.lane.corked is self:
            self.lane.corked = None
        if self.lane.closed:  # closed before its turn ended: nothing sent, no task started
            self._unsent()
            return
        try:
            sent = self.lane.send_parts(self.parts)
        except Exception:
            self._unsent()  # (cannot be encoded) each part's own path meets it, and reports it
            return
        if not sent:  # no connection at hand: the whole turn waits for one, not each part
            task = self.loop.create_task(self._later())
            self.lane.rounds.add(task)  # (`Lane.aclose` ends it, and waits for it)
            task.add_done_callback(self._ended)

    async def _later(self) -> None:
        try:
            self.lane.send_parts(self.parts, await self.lane.connection())
        except Exception:
            self._unsent()

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.lane.rounds.discard(task)
        if task.cancelled():  # (before or while it waited: nothing was sent) no caller waits
            self._unsent()

    def _unsent(self) -> None:
        for _, then in self.parts:
            then(None)


def _send_soon(
    lane: Lane, commands: list[tuple[Any, ...]], then: Callable[[Sent | None], None]
) -> None:
    """Queue `commands` for `lane`'s write at the end of this loop turn; `then` gets
    their `Sent` once answered, or None when they could not be written (no connection
    at hand, or something in them the server holds on purpose)."""
    if blocking(commands):
        then(None)
        return
    loop = asyncio.get_running_loop()
    cork = lane.corked
    if cork is None or cork.loop is not loop:  # (one left by a loop closed mid-turn)
        cork = lane.corked = _Cork(lane, loop)
        loop.call_soon(cork.flush)
    cork.parts.append((commands, then))


def _to(fanin: Fanin, index: int) -> Callable[[Sent | None], None]:
    """`then` for `_send_soon`: pipeline `index`'s answer goes to `fanin`."""

    def then(sent: Sent | None) -> None:
        fanin.deliver(index, sent)

    return then
