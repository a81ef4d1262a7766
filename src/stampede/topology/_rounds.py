"""A round of script calls on several servers at once, without a task per server.

`script_round` writes every server's pipeline of EVALSHAs (`Lane.send_now`) and
wakes its caller once, when the last answer is in, not once per server through a
task, a coroutine chain and a gather. A pipeline answered with plain replies (no
error reply, no lost reply) is done; anything else (a lost or late reply, an
error reply, NOSCRIPT, a redirection) goes on through `resume`, the topology's
own path for that pipeline, taking the answer as its first attempt
(`Lane.pipeline(first=...)`): nothing is sent again that the task path would not
send again. A pipeline that cannot be written (no connection at hand) goes
through `resume` at once. A transaction's prepare and commit rounds use it
(`Shards.scripts`, `Cluster.scripts`).

Rounds of one loop turn share their writes: a pipeline bound for a server where
no round's write is in flight goes at once; while one is, the idempotent
pipelines of every round of the turn bound there are queued and written together
at the end of the turn, one write of one pipeline, whose replies are split back
(each part as a `Sent` of its own commands, so that `resume` sees what it would
have seen alone). A pipeline that is not idempotent always goes alone: a lost
connection ends every part of a shared write, and only idempotent ones may be
resent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._lua import IDEMPOTENT_SHAS
from ._lane import Lane, Sent
from ._retries import is_idempotent

__all__ = ["Resume", "script_round"]

Resume = Callable[[int, Sent | None], Awaitable[list[Any]]]
"""Pipeline `i` by the topology's task path, `first` its attempt (None: not sent);
per command its result."""

Part = tuple[Sequence[Sequence[Any]], "_Round", int]
"""A pipeline queued for a shared write: its commands, its round, its index there."""

_queued: dict[Lane, list[Part]] = {}
"""Per lane, the pipelines of this loop turn waiting for the shared write."""
_flying: dict[Lane, int] = {}
"""Per lane, the round writes sent and not yet answered (absent: none)."""


async def script_round(
    lanes: Sequence[Lane], pipelines: Sequence[list[tuple[Any, ...]]], resume: Resume
) -> list[list[Any] | BaseException]:
    """Pipeline `i` on `lanes[i]` (see the module); per pipeline its plain replies,
    or what `resume` returned (or raised) for it.

    The pipelines resumed run in tasks, concurrently: those not sent, at once;
    those answered otherwise, once every answer is in.
    """
    if not pipelines:
        return []
    round_ = _Round(len(pipelines), resume)
    for i, commands in enumerate(pipelines):
        _submit(lanes[i], commands, round_, i)
    try:
        return await _settle(await round_.future, resume)
    except BaseException:
        for answer in round_.answers:
            if isinstance(answer, asyncio.Future):
                answer.cancel()
        raise


class _Round:
    """One `script_round`'s answers: per pipeline its `Sent`, or the task resuming
    it when it could not be sent (started at once)."""

    __slots__ = ("_left", "_resume", "answers", "future")

    def __init__(self, count: int, resume: Resume) -> None:
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.answers: list[Any] = [None] * count
        self._left = count
        self._resume = resume

    def deliver(self, index: int, answer: Sent | None) -> None:
        if self.future.done():  # the caller gave up
            return
        self.answers[index] = (
            answer if answer is not None else asyncio.ensure_future(self._resume(index, None))
        )
        self._left -= 1
        if self._left == 0:
            self.future.set_result(self.answers)


def _submit(lane: Lane, commands: Sequence[Sequence[Any]], round_: _Round, index: int) -> None:
    """Write the pipeline now, or queue it for the turn's shared write (see the module)."""
    if lane not in _flying or not _resendable(commands):
        _send(lane, [(commands, round_, index)])
        return
    queue = _queued.get(lane)
    if queue is None:
        _queued[lane] = queue = []
        asyncio.get_running_loop().call_soon(_flush, lane)
    queue.append((commands, round_, index))


def _resendable(commands: Sequence[Sequence[Any]]) -> bool:
    """Every command may be sent again (`is_idempotent`; an EVALSHA of a script of
    this process marked idempotent is known at once)."""
    return all(
        (len(c) > 1 and c[0] == "EVALSHA" and c[1] in IDEMPOTENT_SHAS) or is_idempotent(c)
        for c in commands
    )


def _flush(lane: Lane) -> None:
    """The end of the loop turn: the lane's queued pipelines go in one write (those of
    a caller that gave up meanwhile are left out)."""
    parts = [p for p in _queued.pop(lane, ()) if not p[1].future.done()]
    if parts:
        _send(lane, parts)


def _send(lane: Lane, parts: list[Part]) -> None:
    commands = parts[0][0] if len(parts) == 1 else [c for p in parts for c in p[0]]
    try:
        sent = lane.send_now(commands, lambda answer: _answered(lane, parts, answer))
    except Exception:
        sent = False  # the task path meets it again, and reports it
    if sent:
        _flying[lane] = _flying.get(lane, 0) + 1
    else:
        for _, round_, index in parts:
            round_.deliver(index, None)


def _answered(lane: Lane, parts: list[Part], answer: Sent) -> None:
    """A write's answer: each part gets a `Sent` of its own commands and replies."""
    left = _flying.pop(lane, 1) - 1
    if left > 0:
        _flying[lane] = left
    if len(parts) == 1:
        _, round_, index = parts[0]
        round_.deliver(index, answer)
        return
    result, at = answer.result, 0
    for commands, round_, index in parts:
        part = Sent(commands, answer.conn, _to(round_, index))
        if isinstance(result, BaseException):
            part(result)
        else:
            part(result[at : at + len(commands)])
        at += len(commands)


async def _settle(answers: list[Any], resume: Resume) -> list[Any]:
    """Per pipeline its plain replies; those answered otherwise resumed from that
    answer (all at once); the result of the task of one not sent."""
    out: list[Any] = [None] * len(answers)
    waits: list[int] = []
    for i, answer in enumerate(answers):
        if isinstance(answer, Sent):
            plain = answer.plain()
            if plain is not None:
                out[i] = plain
                continue
            answers[i] = asyncio.ensure_future(resume(i, answer))
        waits.append(i)
    if waits:
        done = await asyncio.gather(*(answers[i] for i in waits), return_exceptions=True)
        for i, replies in zip(waits, done, strict=True):
            out[i] = replies
    return out


def _to(round_: _Round, index: int) -> Callable[[Sent], None]:
    """`then` of a part's `Sent`: pipeline `index`'s answer goes to `round_`."""

    def then(sent: Sent) -> None:
        round_.deliver(index, sent)

    return then
