"""Single-node building blocks: MULTI/EXEC, WATCH transactions and scripts.

Both topologies run these on one plain connection to the node that owns the
keys; the topology picks the node and translates errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis import exceptions as rex
from redis.asyncio import Redis

from .base import send

__all__ = ["Body", "Command", "Read", "Script", "optimistic_once", "run_script", "transaction_once"]

Command = tuple[Any, ...]
Read = Callable[..., Awaitable[Any]]
Body = Callable[[Read], Awaitable[Sequence[Command] | None]]


class Script:
    """A Lua script, called with EVALSHA and loaded on NOSCRIPT."""

    def __init__(self, source: bytes | str) -> None:
        self.source = source.encode() if isinstance(source, str) else source
        self.sha = hashlib.sha1(self.source).hexdigest()

    def __repr__(self) -> str:
        return f"Script(sha={self.sha[:12]}...)"


async def run_script(
    client: Any, script: Script, keys: Sequence[bytes], args: Sequence[Any]
) -> Any:
    """EVALSHA, falling back to EVAL (which also caches it) when the node lacks it."""
    try:
        return await send(client, "EVALSHA", script.sha, len(keys), *keys, *args)
    except rex.NoScriptError:
        return await send(client, "EVAL", script.source, len(keys), *keys, *args)


async def transaction_once(client: Redis, commands: Sequence[Command]) -> list[Any]:
    """Run `commands` in one MULTI/EXEC on one connection."""
    pipe: Any
    async with client.pipeline(transaction=True) as pipe:
        for cmd in commands:
            pipe.execute_command(*cmd)
        return list(await pipe.execute())


async def optimistic_once(
    client: Redis, keys: Sequence[bytes], body: Body
) -> tuple[bool, list[Any]]:
    """WATCH `keys`, let `body` read and plan, run its plan in MULTI/EXEC.

    `body(read)` may call `await read("GET", key)` (any command) on the watched
    connection and returns the commands for MULTI/EXEC, or None to write nothing.
    Returns (False, []) when a watched key changed before EXEC.
    """
    pipe: Any
    async with client.pipeline(transaction=True) as pipe:
        await pipe.watch(*keys)

        async def read(*args: Any) -> Any:
            return await send(pipe, *args)

        commands = await body(read)
        if commands is None:
            await pipe.unwatch()
            return True, []
        pipe.multi()
        for cmd in commands:
            pipe.execute_command(*cmd)
        try:
            return True, list(await pipe.execute())
        except rex.WatchError:
            return False, []


def updater_body(
    keys: Sequence[bytes],
    update: Callable[[list[bytes | None]], Awaitable[list[bytes] | None]],
    expire_at_ms: int | None,
) -> Body:
    """The `Body` of `watch_update`: MGET the keys, SET what `update` returns."""

    async def body(read: Read) -> Sequence[Command] | None:
        current = await read("MGET", *keys)
        new = await update(list(current))
        if new is None:
            return None
        tail = ("PXAT", expire_at_ms) if expire_at_ms else ()
        return [("SET", key, value, *tail) for key, value in zip(keys, new, strict=True)]

    return body
