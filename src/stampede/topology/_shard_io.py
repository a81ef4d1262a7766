"""What a `Shards` sends to one primary for a batch of reads or guarded writes.

Reads: one MGET for every read of the batch. Writes: one guarded-script call
(EVALSHA, EVAL after NOSCRIPT) for every write of the batch. Each is a batch
function for the shard's `Coalescer` (`run`) and its `Quick`: `start` writes the
same first pipeline `run` would at once, on a connection at hand, and `finish`
takes its answer when it is the plain success (no error reply, no lost reply);
anything else goes to `resume`, which is `run` with that answer as the lane
pipeline's first attempt, through the shard's `call` (its error mapping and, over
Sentinel, its failover rules).

A transaction's rounds of scripts go the same way through `_rounds.script_round`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._base import TRANSPORT_ERRORS, guarded, translate
from ._encode import Packed
from ._guard import GUARD, WriteRequest, joined, split_codes, unknown_if_resent
from ._lane import Lane, Sent
from ._node_ops import evalsha
from ._reply_errors import ReadOnlyError
from ._retries import watch_losses

__all__ = ["Call", "ShardReads", "ShardWrites", "guard_call", "primary_call"]

T = TypeVar("T")

Call = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Awaits a call to the shard with its transport errors mapped (`Shards._call`)."""


async def primary_call(lane: Lane, name: str, call: Callable[[], Awaitable[T]], *, safe: bool) -> T:
    """`call()` on the primary of `lane`, its transport errors mapped (`guarded`). A
    READONLY reply says the server is a primary no more: a managed failover demoted
    it (its name now resolves to the promoted replica), and a demoted primary keeps
    its connections. The lane's connections are closed, so that the next ones resolve
    the name again, and a call safe to resend goes once more, on a fresh one."""
    try:
        return await call()
    except ReadOnlyError as exc:
        lane.repoint(lane.endpoint)
        if not safe:
            raise translate(exc, name) from exc
    except TRANSPORT_ERRORS as exc:
        raise translate(exc, name) from exc
    return await guarded(name, call)


def _mget(requests: list[list[bytes]]) -> tuple[Any, ...]:
    if len(requests) == 1:  # a lone read's batch
        return ("MGET", *requests[0])
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
    replies = answer.plain()
    return _NOT_PLAIN if replies is None else replies[0]


class ShardReads:
    """One MGET for every read of a batch on one shard (see the module)."""

    __slots__ = ("_call", "_lane")

    def __init__(self, lane: Lane, call: Call) -> None:
        self._lane = lane
        self._call = call

    def start(self, requests: list[list[bytes]], then: Callable[[Sent], None]) -> bool:
        return self._lane.send_now([_mget(requests)], then)

    def finish(self, requests: list[list[bytes]], answer: Sent) -> list[Any] | None:
        result = answer.result
        if type(result) is list and len(result) == 1 and type(result[0]) is list:
            return _split(requests, result[0])  # the MGET's array: what `_plain` finds
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


def guard_call(requests: list[WriteRequest]) -> tuple[Any, ...]:
    """The one EVALSHA of a batch of guarded writes: the command `run` sends first (its
    requests' keys, then their ARGV, in order, as `joined` makes them), built in one
    list; with its RESP bytes joined from the requests' own (`Packed`) when every
    request has them."""
    if len(requests) == 1:  # a lone request (every part of a lone write): no lists
        request = requests[0]
        keys, resp = request.keys, request.resp
        one = ("EVALSHA", GUARD.sha, len(keys), *keys, *request.argv)
        if resp is None:
            return one
        call = Packed(one)
        n = b"%d" % len(keys)
        call.resp = b"*%d\r\n%s$%d\r\n%s\r\n%s%s" % (len(one), _HEAD, len(n), n, *resp)
        return call
    command: list[Any] = ["EVALSHA", GUARD.sha, 0]
    count = 0
    made: list[tuple[bytes, bytes]] = []
    for request in requests:
        command += request.keys
        count += len(request.keys)
        if request.resp is not None:
            made.append(request.resp)
    command[2] = count
    for request in requests:  # per write: its key count, then its stamp and values
        command.append(len(request.keys))
        command += request.argv
    if len(made) != len(requests):
        return tuple(command)
    n = b"%d" % count
    call = Packed(command)
    args: list[bytes] = []
    for request, (_, made_args) in zip(requests, made, strict=True):
        c = b"%d" % len(request.keys)
        args += (b"$%d\r\n%s\r\n" % (len(c), c), made_args)
    call.resp = b"".join(
        [
            b"*%d\r\n%s$%d\r\n%s\r\n" % (len(command), _HEAD, len(n), n),
            *[names for names, _ in made],
            *args,
        ]
    )
    return call


_SHA = GUARD.sha.encode()
_HEAD = b"$7\r\nEVALSHA\r\n$%d\r\n%s\r\n" % (len(_SHA), _SHA)
"""The RESP of a guard call's first two arguments."""


class ShardWrites:
    """One guarded-script call for every write of a batch on one shard (see the module)."""

    __slots__ = ("_call", "_lane", "_name")

    def __init__(self, lane: Lane, call: Call, name: str) -> None:
        self._lane = lane
        self._call = call
        self._name = name

    def start(self, requests: list[WriteRequest], then: Callable[[Sent], None]) -> bool:
        return self._lane.send_now([guard_call(requests)], then)

    def finish(self, requests: list[WriteRequest], answer: Sent) -> list[Any] | None:
        result = answer.result
        if type(result) is list and len(result) == 1 and type(result[0]) is list:
            codes = result[0]  # the script's array: a plain answer (what `_plain` finds)
        else:
            codes = _plain(answer)
            if codes is _NOT_PLAIN:
                return None
        return split_codes(requests, codes, self._name)

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

        with watch_losses() as lost:  # (a resend refused as expired: unknown)
            codes = await self._call(call)
        return unknown_if_resent(split_codes(requests, codes, self._name), self._name, lost.count)
