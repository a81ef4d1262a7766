"""What a `Shards` sends to one primary for a batch of reads or guarded writes.

Reads: one MGET for every read of the batch. Writes: one guarded-script call
(EVALSHA, EVAL after NOSCRIPT) for every write of the batch. Each is a batch
function for the shard's `Coalescer` (`run`) and its `Quick`: `start` writes the
same first pipeline `run` would at once, on a connection at hand, and `finish`
takes its answer when it is the plain success (no error reply, no lost reply);
anything else goes to `resume`, which is `run` with that answer as the lane
pipeline's first attempt, through the shard's `call` (its error mapping and, over
Sentinel, its failover rules).

Scripts (`script_round`, a transaction's round): every call's EVALSHA is written at
once (`Lane.send_now`), one per call, and the caller wakes once, when the last
answer is in (`Fanin`); a call that got anything but the plain success (or could
not be sent now) goes on through `resume`, from that answer, as the task path
would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import ShardError
from ._coalesce import Fanin
from ._guard import GUARD, WriteRequest, joined, split_codes
from ._lane import Lane, Sent
from ._node_ops import evalsha

__all__ = ["Call", "ShardReads", "ShardWrites", "script_round"]

Call = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Awaits a call to the shard with its transport errors mapped (`Shards._call`)."""


def _mget(requests: list[list[bytes]]) -> tuple[Any, ...]:
    return ("MGET", *[key for keys in requests for key in keys])


def _split(requests: list[list[bytes]], values: list[Any]) -> list[Any]:
    out: list[Any] = []
    pos = 0
    for keys in requests:
        out.append(values[pos : pos + len(keys)])
        pos += len(keys)
    return out


_NOT_PLAIN: Any = object()


def _plain(answer: Sent) -> Any:
    """The one reply of a one-command pipeline that got through as is; else `_NOT_PLAIN`."""
    result = answer.result
    if isinstance(result, BaseException):
        return _NOT_PLAIN
    (reply,) = result
    return _NOT_PLAIN if isinstance(reply, BaseException) else reply


class ShardReads:
    """One MGET for every read of a batch on one shard (see the module)."""

    __slots__ = ("_call", "_lane")

    def __init__(self, lane: Lane, call: Call) -> None:
        self._lane = lane
        self._call = call

    def start(self, requests: list[list[bytes]], then: Callable[[Sent], None]) -> bool:
        return self._lane.send_now([_mget(requests)], then)

    def finish(self, requests: list[list[bytes]], answer: Sent) -> list[Any] | None:
        values = _plain(answer)
        return None if values is _NOT_PLAIN else _split(requests, values)

    async def resume(self, requests: list[list[bytes]], answer: Sent) -> list[Any]:
        return await self.run(requests, answer)

    async def run(self, requests: list[list[bytes]], first: Sent | None = None) -> list[Any]:
        """One MGET for every read of this loop turn on the shard."""
        command = _mget(requests)
        lane = self._lane

        async def call() -> Any:
            (reply,) = await lane.pipeline([command], first=first)
            if isinstance(reply, BaseException):
                raise reply
            return reply

        return _split(requests, await self._call(call))


class ShardWrites:
    """One guarded-script call for every write of a batch on one shard (see the module)."""

    __slots__ = ("_call", "_lane", "_name")

    def __init__(self, lane: Lane, call: Call, name: str) -> None:
        self._lane = lane
        self._call = call
        self._name = name

    def start(self, requests: list[WriteRequest], then: Callable[[Sent], None]) -> bool:
        keys, argv, _ = joined(requests)
        return self._lane.send_now([("EVALSHA", GUARD.sha, len(keys), *keys, *argv)], then)

    def finish(self, requests: list[WriteRequest], answer: Sent) -> list[Any] | None:
        codes = _plain(answer)
        return None if codes is _NOT_PLAIN else split_codes(requests, codes, self._name)

    async def resume(self, requests: list[WriteRequest], answer: Sent) -> list[Any]:
        return await self.run(requests, answer)

    async def run(self, requests: list[WriteRequest], first: Sent | None = None) -> list[Any]:
        """One guarded-script call for every write of this loop turn on the shard."""
        keys, argv, _ = joined(requests)
        lane = self._lane

        async def call() -> Any:
            (codes,) = await evalsha(lane, [(GUARD, keys, argv)], first=first)
            if isinstance(codes, BaseException):
                raise codes
            return codes

        return split_codes(requests, await self._call(call), self._name)


Resume = Callable[[int, Sent | None], Awaitable[Any]]
"""Call `i` by the task path (`Shards._call` of `run_script`), `first` its attempt."""


async def script_round(
    lanes: Sequence[Lane], commands: Sequence[tuple[Any, ...]], resume: Resume
) -> list[Any]:
    """One EVALSHA per call, call `i` on `lanes[i]`, all written now; per call its
    reply, or the `ShardError` it met (any other error raises, as `each_script`).

    A call sent now and answered with a plain reply is done; one whose answer is
    anything else (a lost reply, an error reply, NOSCRIPT) goes to `resume(i, sent)`
    once every answer is in; one that could not be sent now to `resume(i, None)` at
    once. Those run in tasks, concurrently.
    """
    fanin, unsent = _send_all(lanes, commands)
    later = (
        asyncio.gather(*(resume(i, None) for i in unsent), return_exceptions=True)
        if unsent
        else None
    )
    try:
        out = await _settle(await fanin.future, resume)
        if later is not None:
            for i, reply in zip(unsent, await later, strict=True):
                out[i] = reply
    except BaseException:
        if later is not None:
            later.cancel()
        raise
    for reply in out:
        if isinstance(reply, BaseException) and not isinstance(reply, ShardError):
            raise reply
    return out


def _send_all(
    lanes: Sequence[Lane], commands: Sequence[tuple[Any, ...]]
) -> tuple[Fanin, list[int]]:
    """Each command written now where a connection is at hand, its `Sent` going to the
    `Fanin` (None in the place of one not sent); and the indexes not sent."""
    fanin = Fanin(len(commands))
    unsent: list[int] = []
    for i, command in enumerate(commands):
        try:
            sent = lanes[i].send_now([command], _to(fanin, i))
        except Exception:
            sent = False  # the task path meets it again, and reports it
        if not sent:
            unsent.append(i)
    for i in unsent:
        fanin.deliver(i, None)
    return fanin, unsent


async def _settle(answers: list[Sent | None], resume: Resume) -> list[Any]:
    """Per call its plain reply; the calls answered otherwise resumed from that answer
    (all at once); None in the place of a call not sent."""
    out: list[Any] = [None] * len(answers)
    again: list[int] = []
    for i, answer in enumerate(answers):
        if answer is not None:
            reply = _plain(answer)
            if reply is _NOT_PLAIN:
                again.append(i)
            else:
                out[i] = reply
    if again:
        redone = await asyncio.gather(
            *(resume(i, answers[i]) for i in again), return_exceptions=True
        )
        for i, reply in zip(again, redone, strict=True):
            out[i] = reply
    return out


def _to(fanin: Fanin, index: int) -> Callable[[Sent], None]:
    """`then` for `send_now`: the call's `Sent` goes to `fanin` as part `index`."""

    def then(sent: Sent) -> None:
        fanin.deliver(index, sent)

    return then
