"""Durability a writer asks for: `WAIT` (and `WAITAOF`) pipelined with the guarded
write on the write's own connection.

`WAIT n ms` answers how many replicas have every write the connection sent before
it, so it must follow the write on the same connection: a durable write goes as
one pipeline per shard (the guard's EVALSHA, then `WAIT`, then `WAITAOF 1 n ms`
when `aof` is asked; a node that answers NOSCRIPT ran none of it, and gets the
whole pipeline again with EVAL, so no retry moves the write to another connection).
The waits change nothing and are safe to resend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from .._lua import Script, as_eval
from ..errors import ShardError
from ._base import WriteOutcome, carried, translated
from ._floor import needs_floors, raise_floors
from ._guard import GUARD, WriteRequest, split_codes, unknown_if_resent
from ._reply_errors import NoScriptError
from ._retries import watch_losses

if TYPE_CHECKING:
    from ..typing import GuardStamp, Topology

__all__ = [
    "acks_of",
    "asks_durability",
    "durable_write",
    "plain_stamp",
    "script_with_wait",
    "sent_with_wait",
    "wait_commands",
    "waits",
]


def asks_durability(stamp: GuardStamp) -> bool:
    return bool(stamp.get("replicas") or stamp.get("aof"))


def plain_stamp(**stamp: Unpack[GuardStamp]) -> GuardStamp:
    """The stamp without its durability keywords (a write that waits for nothing)."""
    out: GuardStamp = {"version": stamp["version"], "token": stamp["token"]}
    for name in ("expire_at_ms", "limit", "keep_ms"):
        if name in stamp:
            out[name] = stamp[name]
    return out


def waits(replicas: int, wait_ms: int, aof: bool) -> list[tuple[Any, ...]]:
    """The commands that follow a durable write on its connection: `WAIT`, and
    `WAITAOF` (the local fsync and `replicas` replicas') when `aof`."""
    out: list[tuple[Any, ...]] = [("WAIT", replicas, wait_ms)]
    if aof:
        out.append(("WAITAOF", 1, replicas, wait_ms))
    return out


def wait_commands(stamp: GuardStamp) -> list[tuple[Any, ...]]:
    """`waits` as a guarded write's stamp asks them."""
    return waits(stamp.get("replicas", 0), stamp.get("wait_ms", 1000), bool(stamp.get("aof")))


def acks_of(replies: list[Any]) -> int:
    """Replicas that acknowledged, from the replies of `wait_commands` (0 when the
    server refused them; with `aof`, the replicas that fsynced, and 0 when the
    local fsync did not happen)."""
    count = replies[0] if isinstance(replies[0], int) else 0
    if len(replies) > 1:
        aof = replies[1]
        if not (isinstance(aof, list) and len(aof) == 2 and int(aof[0]) >= 1):
            return 0
        count = min(count, int(aof[1]))
    return count


Send = Callable[[int, list[tuple[Any, ...]]], Awaitable[list[Any]]]


Run = Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]]


async def sent_with_wait(
    run: Run, guards: list[tuple[Any, ...]], then: list[tuple[Any, ...]]
) -> list[Any]:
    """`guards` (EVALSHA calls) then the waits `then`, as one pipeline through `run`. A
    node that answers NOSCRIPT ran none of it: the whole pipeline goes again with EVAL,
    so that the waits still follow the writes on one connection."""
    replies = await run([*guards, *then])
    if any(isinstance(r, NoScriptError) for r in replies[: len(guards)]):
        evals = [as_eval(g) or g for g in guards]
        replies = await run([*evals, *then])
    return replies


async def script_with_wait(
    run: Run,
    script: Script,
    keys: Sequence[bytes],
    args: Sequence[Any],
    then: list[tuple[Any, ...]],
) -> tuple[Any, int]:
    """One script call and the waits `then` as one pipeline through `run`: the script's
    reply (an error reply raises) and the replicas that acknowledged it."""
    call = ("EVALSHA", script.sha, len(keys), *keys, *args)
    replies = await sent_with_wait(run, [call], then)
    if isinstance(replies[0], BaseException):
        raise replies[0]
    return replies[0], acks_of(replies[1:])


async def durable_write(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    stamp: GuardStamp,
    partition: dict[int, list[int]],
    names: Sequence[str],
    send: Send,
    *,
    floors: Topology,
) -> WriteOutcome:
    """The guarded write of `keys` (shard index -> positions in `partition`), then WAIT
    (and WAITAOF), one pipeline per shard through `send(shard, commands)`; a floor the
    guard could not raise is raised through `floors` (`_floor`). Carried to its end
    (`carried`) even when the caller is cancelled: a guard that landed gets its floors."""
    return await carried(_durable_write(keys, values, stamp, partition, names, send, floors))


async def _durable_write(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    stamp: GuardStamp,
    partition: dict[int, list[int]],
    names: Sequence[str],
    send: Send,
    floors: Topology,
) -> WriteOutcome:
    outcome = WriteOutcome()

    async def one(shard: int, positions: list[int]) -> None:
        request = WriteRequest.build(keys, values, positions, (), **stamp)
        guard = ("EVALSHA", GUARD.sha, len(request.keys), *request.keys, *request.argv)
        name = names[shard]
        try:
            with watch_losses() as lost:  # (a resend refused as expired: unknown)
                replies = await sent_with_wait(
                    lambda c: send(shard, c), [guard], wait_commands(stamp)
                )
        except ShardError as exc:
            outcome.failed.update(dict.fromkeys(request.keys, exc))
            return
        codes = translated(replies[0], name)
        if isinstance(codes, ShardError):
            outcome.failed.update(dict.fromkeys(request.keys, codes))
            return
        (mine,) = unknown_if_resent(split_codes([request], codes, name), name, lost.count)
        if isinstance(mine, ShardError):
            outcome.failed.update(dict.fromkeys(request.keys, mine))
            return
        outcome.results.update(zip(request.keys, mine, strict=True))
        outcome.acks[name] = acks_of(replies[1:])

    await asyncio.gather(*(one(shard, pos) for shard, pos in partition.items()))
    if needs_floors(outcome.results.values(), floors):
        await raise_floors(floors, outcome, stamp, wait_commands(stamp))
    return outcome
