"""Single-node building blocks: MULTI/EXEC, WATCH transactions and scripts.

Both topologies run these on the `Lane` of the node that owns the keys; the
topology picks the node and translates errors.

A transaction that writes is made exactly-once with an operation marker, a key
in the keys' slot unique to the attempt (`retries.Markers`): the connection
WATCHes it (acknowledged before EXEC is sent) and the transaction ends with
`SET <marker> applied PX 600000`. When the reply to EXEC is lost, a fresh
connection fences: `SET <marker> fenced NX PX 600000`, then `GET <marker>`.

- `fenced`: the transaction had not run, and now never will (its WATCH sees the
  marker changed): `NotApplied`, and the caller may run it again;
- `applied`: it ran, exactly once: `RepliesLostError` (its replies are unknown);
- the fence cannot be reached: `OutcomeUnknownError`.

A script is a user's Lua, which cannot be fenced: after a lost reply it raises
`OutcomeUnknownError` (stampede's own idempotent scripts are resent instead).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._lua import Script, as_eval
from ..errors import ClockSkewError, InvalidKeyError, OutcomeUnknownError, RepliesLostError
from ._base import TRANSPORT_ERRORS
from ._lane import LOST, Lane, Sent, Session
from ._resp import ConnectionLost, NoScriptError
from ._retries import MARKER_TTL_MS, all_idempotent, describe
from ._shape import shape

if TYPE_CHECKING:
    from ..typing import Topology

__all__ = [
    "Body",
    "Command",
    "NotApplied",
    "Read",
    "Run",
    "Script",
    "eval_fallback",
    "evalsha",
    "fence",
    "marker_id",
    "optimistic_once",
    "pings",
    "run_script",
    "transaction",
    "transaction_once",
    "watch_update",
]

Command = tuple[Any, ...]
Read = Callable[..., Awaitable[Any]]
Body = Callable[[Read], Awaitable[Sequence[Command] | None]]


class NotApplied(ConnectionLost):
    """A transaction's reply was lost, and the fence made sure it never applies."""


def marker_id() -> str:
    """A fresh id for one attempt's operation marker."""
    return os.urandom(12).hex()


async def run_script(
    lane: Lane,
    script: Script,
    keys: Sequence[bytes],
    args: Sequence[Any],
    first: Sent | None = None,
) -> Any:
    """EVALSHA, falling back to EVAL (which also caches it) when the node lacks it.

    Never resent after a lost reply unless the script was declared idempotent
    (`retries.idempotent_script`): `OutcomeUnknownError` instead. `first`: the
    EVALSHA's first attempt, already made (`Lane.send_now`).
    """
    (reply,) = await evalsha(lane, [(script, keys, args)], first=first)
    if isinstance(reply, BaseException):
        raise reply
    return reply


Run = Callable[[list[Command]], Awaitable[list[Any]]]
"""Runs commands as one pipeline somewhere and returns their replies."""


async def eval_fallback(run: Run, commands: Sequence[Command]) -> list[Any]:
    """The one EVALSHA -> EVAL path: `run(commands)`, then once more, as EVAL (which
    also caches the script), the EVALSHAs the node answered NOSCRIPT."""
    replies = await run(list(commands))
    missing = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
    again = [(i, as_eval(tuple(commands[i]))) for i in missing]
    again = [(i, c) for i, c in again if c is not None]
    if again:
        redone = await run([c for _, c in again if c is not None])
        for (i, _), reply in zip(again, redone, strict=True):
            replies[i] = reply
    return replies


async def evalsha(
    lane: Lane,
    calls: Sequence[tuple[Script, Sequence[Any], Sequence[Any]]],
    *,
    resend: bool | None = None,
    first: Sent | None = None,
) -> list[Any]:
    """Run `calls` (script, keys, args) as one pipeline on `lane` (`eval_fallback`);
    their replies, an error reply as a value. Resent after a lost reply only when
    `resend` allows it (default: every script idempotent). `first`: the EVALSHA
    pipeline's first attempt, already made (`Lane.send_now`)."""

    async def run(commands: list[Command]) -> list[Any]:
        return await lane.pipeline(commands, resend=resend, first=first)

    return await eval_fallback(run, [("EVALSHA", s.sha, len(k), *k, *a) for s, k, a in calls])


async def fence(lane: Lane, marker: bytes, operation: str, cause: BaseException) -> bool:
    """After a lost EXEC reply: True when it applied, False when it now never will.

    `OutcomeUnknownError` when the node cannot be asked. The fence itself is safe
    to resend: a second `SET NX` finds our own `fenced`.
    """
    try:
        _, state = await lane.pipeline(
            [("SET", marker, b"fenced", "NX", "PX", MARKER_TTL_MS), ("GET", marker)], resend=True
        )
    except LOST as exc:
        raise OutcomeUnknownError(operation, shard=lane.name, cause=cause) from exc
    if state == b"applied":
        return True
    if state == b"fenced":
        return False
    raise OutcomeUnknownError(operation, shard=lane.name, cause=cause)


async def _exec(session: Session, commands: Sequence[Command], marker: bytes) -> list[Any] | None:
    """MULTI, `commands`, the marker's SET, EXEC on a session that WATCHes `marker`.

    The parsed replies of `commands`; None when a watched key changed. A lost
    reply is fenced: `RepliesLostError` (applied) or `NotApplied`.
    """
    block = [("MULTI",), *commands, ("SET", marker, b"applied", "PX", MARKER_TTL_MS), ("EXEC",)]
    lane = session.lane
    try:
        replies = await session.pipeline(block)
    except LOST as exc:
        operation = describe(block[:-2] + block[-1:])
        if await fence(lane, marker, operation, exc):
            raise RepliesLostError(operation, shard=lane.name, cause=exc) from exc
        raise NotApplied(f"the reply to EXEC was lost and the fence stopped it: {exc}") from exc
    return _results(lane, commands, replies)


def _results(lane: Lane, commands: Sequence[Command], replies: list[Any]) -> list[Any] | None:
    """The parsed replies of `commands` from MULTI ... EXEC replies; None: EXEC aborted."""
    outcome = replies[-1]
    if isinstance(outcome, BaseException):  # EXECABORT: raise why it was refused
        raise next((r for r in replies[:-1] if isinstance(r, BaseException)), outcome)
    if outcome is None:
        return None
    results = list(outcome)[: len(commands)]
    error = next((r for r in results if isinstance(r, BaseException)), None)
    if error is not None:
        raise error
    return [shape(cmd, r) for cmd, r in zip(commands, results, strict=True)]


async def transaction_once(
    lane: Lane, commands: Sequence[Command], marker: bytes | None
) -> list[Any]:
    """One MULTI/EXEC of `commands`; exactly-once through `marker` (None: read-only).

    `NotApplied` when the reply was lost and the fence stopped it.
    """
    if marker is None:
        replies = await lane.pipeline([("MULTI",), *commands, ("EXEC",)], resend=True)
        results = _results(lane, commands, replies)
        assert results is not None  # nothing is watched
        return results
    async with lane.session() as session:
        await session.call("WATCH", marker)
        results = await _exec(session, commands, marker)
        if results is None:  # only our own fence touches the marker
            raise NotApplied("the operation marker changed before EXEC")
        return results


async def transaction(
    lane: Lane, commands: Sequence[Command], marker: Callable[[], bytes]
) -> list[Any]:
    """MULTI/EXEC of `commands`, exactly once: retried (new marker) while fenced off.

    Read-only commands skip the marker (resending them is harmless).
    """
    if all_idempotent(commands):
        return await transaction_once(lane, commands, None)
    attempt = 0
    while True:
        try:
            return await transaction_once(lane, commands, marker())
        except NotApplied:
            if attempt >= lane.retries:
                raise
            attempt += 1


async def optimistic_once(
    lane: Lane, keys: Sequence[bytes], body: Body, marker: bytes
) -> tuple[bool, list[Any]]:
    """WATCH `keys` (and `marker`), let `body` read and plan, run its plan in MULTI/EXEC.

    `body(read)` may call `await read("GET", key)` (any command) on the watched
    connection and returns the commands for MULTI/EXEC, or None to write nothing.
    Returns (False, []) when a watched key changed before EXEC, when its reply was
    lost and the fence stopped it, or when the connection dropped before EXEC was
    sent (nothing was written: run `body` again). `RepliesLostError` when the reply
    was lost but the marker shows it applied.
    """
    async with lane.session() as session:

        async def read(*args: Any) -> Any:
            return shape(args, await session.call(*args))

        declined = False
        try:
            await session.call("WATCH", *keys, marker)
            commands = await body(read)
            if commands is None:
                declined = True
                await session.call("UNWATCH")
                return True, []
        except LOST as exc:  # WATCH, a read or UNWATCH: nothing written (session dropped)
            if declined:
                return True, []
            if isinstance(exc, ConnectionLost):  # a timeout is not retried: the node is slow
                return False, []
            raise
        try:
            results = await _exec(session, commands, marker)
        except NotApplied:
            return False, []
        if results is None:
            return False, []
        return True, results


def updater_body(
    keys: Sequence[bytes],
    update: Callable[[list[bytes | None]], Awaitable[list[bytes] | None]],
    expire_at_ms: int | None,
    then: Callable[[list[bytes]], Sequence[Command]] | None = None,
) -> Body:
    """The `Body` of `watch_update`: MGET the keys, SET what `update` returns, then
    the commands `then` makes of those values (in the same MULTI)."""

    async def body(read: Read) -> Sequence[Command] | None:
        current = list(await read("MGET", *keys))
        missing = [k for k, v in zip(keys, current, strict=True) if v is None]
        # MGET answers nil for a key of another type as for a missing one, and SET
        # would replace it: refused, as the guard and a transaction refuse it
        if missing and await read("EXISTS", *missing):
            for key in missing:
                if await read("EXISTS", key):
                    raise InvalidKeyError(
                        f"key {key!r} holds a non-string value (WRONGTYPE); stampede's keys "
                        "must be plain strings: rename or delete it (nothing was written)",
                        key=key,
                    )
        new = await update(current)
        if new is None:
            return None
        if expire_at_ms and expire_at_ms <= _ms(await read("TIME")):  # it would vanish
            raise ClockSkewError("", keys, "expired", "the expiry instant had passed")
        tail = ("PXAT", expire_at_ms) if expire_at_ms else ()
        sets = [("SET", key, value, *tail) for key, value in zip(keys, new, strict=True)]
        return sets if then is None else [*sets, *then(new)]

    return body


def _ms(time: Any) -> int:
    """A `TIME` reply in unix milliseconds."""
    return int(time[0]) * 1000 + int(time[1]) // 1000


async def watch_update(
    topology: Topology,
    keys: Sequence[bytes],
    update: Callable[[list[bytes | None]], Awaitable[list[bytes] | None]],
    *,
    expire_at_ms: int | None = None,
    then: Callable[[list[bytes]], Sequence[Command]] | None = None,
) -> bool:
    """WATCH `keys` (one unit), read them, and SET what `update` returns in MULTI/EXEC
    (followed by what `then` makes of it). `ClockSkewError` (`why` "expired"), nothing
    written, when `expire_at_ms` is not after the server's clock (`TIME`, read last).

    False when a watched key changed (the caller retries), True when the
    transaction ran or `update` returned None (nothing to write).
    """
    body = updater_body(keys, update, expire_at_ms, then)
    ok, _ = await topology.optimistic(keys, body)
    return ok


_PROBE = 0.5
"""Seconds a node that failed or timed out has to answer a PING (`pings`)."""


async def pings(lane: Lane) -> bool:
    """Whether `lane`'s server answers a PING within `_PROBE` seconds (at most the socket
    timeout), on a connection of its own, opened as the lane opens one (a Sentinel
    shard's, after a loss, only where the Sentinels confirm a primary)."""
    try:
        conn = await lane.hold()
    except TRANSPORT_ERRORS:
        return False
    broken = True
    try:
        (reply,) = await conn.send([("PING",)], timeout=min(_PROBE, lane.endpoint.socket_timeout))
        broken = False
    except TRANSPORT_ERRORS:
        return False
    finally:
        lane.release(conn, broken=broken)
    return not isinstance(reply, BaseException)
