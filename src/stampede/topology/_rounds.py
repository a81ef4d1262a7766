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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._coalesce import Fanin
from ._lane import Lane, Sent

__all__ = ["Resume", "script_round"]

Resume = Callable[[int, Sent | None], Awaitable[list[Any]]]
"""Pipeline `i` by the topology's task path, `first` its attempt (None: not sent);
per command its result."""


async def script_round(
    lanes: Sequence[Lane], pipelines: Sequence[list[tuple[Any, ...]]], resume: Resume
) -> list[list[Any] | BaseException]:
    """Pipeline `i` on `lanes[i]`, all written now; per pipeline its plain replies,
    or what `resume` returned (or raised) for it (see the module).

    The pipelines resumed run in tasks, concurrently: those not sent from the start,
    those answered otherwise once every answer is in.
    """
    if not pipelines:
        return []
    fanin, unsent = _send_all(lanes, pipelines)
    later = (
        asyncio.gather(*(resume(i, None) for i in unsent), return_exceptions=True)
        if unsent
        else None
    )
    try:
        out = await _settle(await fanin.future, resume)
        if later is not None:
            for i, replies in zip(unsent, await later, strict=True):
                out[i] = replies
    except BaseException:
        if later is not None:
            later.cancel()
        raise
    return out


def _send_all(
    lanes: Sequence[Lane], pipelines: Sequence[list[tuple[Any, ...]]]
) -> tuple[Fanin, list[int]]:
    """Each pipeline written now where a connection is at hand, its `Sent` going to
    the `Fanin` (None in the place of one not sent); and the indexes not sent."""
    fanin = Fanin(len(pipelines))
    unsent: list[int] = []
    for i, commands in enumerate(pipelines):
        try:
            sent = lanes[i].send_now(commands, _to(fanin, i))
        except Exception:
            sent = False  # the task path meets it again, and reports it
        if not sent:
            unsent.append(i)
    for i in unsent:
        fanin.deliver(i, None)
    return fanin, unsent


async def _settle(answers: list[Sent | None], resume: Resume) -> list[Any]:
    """Per pipeline its plain replies; those answered otherwise resumed from that
    answer (all at once); None in the place of a pipeline not sent."""
    out: list[Any] = [None] * len(answers)
    again: list[int] = []
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        plain = answer.plain()
        if plain is None:
            again.append(i)
        else:
            out[i] = plain
    if again:
        redone = await asyncio.gather(
            *(resume(i, answers[i]) for i in again), return_exceptions=True
        )
        for i, replies in zip(again, redone, strict=True):
            out[i] = replies
    return out


def _to(fanin: Fanin, index: int) -> Callable[[Sent], None]:
    """`then` for `send_now`: pipeline `index`'s `Sent` goes to `fanin`."""

    def then(sent: Sent) -> None:
        fanin.deliver(index, sent)

    return then
