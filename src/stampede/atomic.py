"""Server-side atomicity for co-located keys: MULTI/EXEC, WATCH retries and Lua scripts.

When every key an operation touches shares one hash slot (give them one hash tag:
`user:{42}:balance`, `user:{42}:pending`), the server itself makes the operation
atomic, on independent primaries and on a Redis Cluster alike:

```python
from stampede import atomic

await atomic.multi(st, [("DECRBY", "user:{42}:balance", 5), ("INCRBY", "user:{42}:pending", 5)])

reserve = atomic.script(LUA_SOURCE, name="reserve")
await reserve(st, keys=["sku:{9}:stock", "sku:{9}:reserved"], args=[2])
```

Every helper checks the slot of every key first and raises `CrossSlotError`
(naming each key and its slot) before anything is sent. Each takes a `Stampede` or
a bare `Topology`; either way the commands go through the topology, which routes
them to the slot's owner and follows a migrating slot.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ._backoff import backoff
from ._commands import Command as Command
from ._commands import commands_of, key_list, listed
from ._commands import keys_of as keys_of
from .errors import (
    CrossSlotError,
    InvalidKeyError,
    InvalidValueError,
    OutcomeUnknownError,
    RepliesLostError,
    WriteConflict,
)
from .keys import to_bytes
from .options import check_count, check_seconds
from .topology._encode import check_arg, pack
from .topology._node_ops import Read, Script
from .topology._retries import read_only
from .typing import HasTopology, Topology

__all__ = [
    "Command",
    "RegisteredScript",
    "Target",
    "WatchFn",
    "WatchResult",
    "Watched",
    "common_slot",
    "keys_of",
    "multi",
    "script",
    "topology_of",
    "watch",
]

Target: TypeAlias = HasTopology | Topology
"""What the helpers accept: a `Stampede` (its `.topology` is used) or a `Topology`."""
Key: TypeAlias = bytes | str


def topology_of(target: Target) -> Topology:
    """The `Topology` behind `target` (a `Stampede` or a topology itself)."""
    return target.topology if isinstance(target, HasTopology) else target


def common_slot(target: Target, keys: Sequence[Key], operation: str) -> int:
    """The one hash slot every key shares; `CrossSlotError` (keys and slots) otherwise.

    `operation` names the caller in the message, e.g. `"multi()"`.
    """
    topology = topology_of(target)
    raw = key_list(keys, operation)
    if not raw:
        raise InvalidKeyError(
            f"{operation} names no key; the keys decide which shard runs it, so name them"
        )
    slots = {k: topology.slot_of(k) for k in raw}
    if len(set(slots.values())) > 1:
        raise CrossSlotError(slots, operation=operation)
    return next(iter(slots.values()))


def _commands(commands: object, what: str) -> list[Command]:
    """`commands` as a list of tuples; `InvalidValueError` for anything else."""
    if isinstance(commands, Sequence) and not isinstance(commands, str | bytes):
        if all(isinstance(c, Sequence) and not isinstance(c, str | bytes) for c in commands):
            return [tuple(c) for c in commands]
    raise InvalidValueError(
        f"{what} a list of commands, each a tuple such as ('SET', key, value), got "
        f"{type(commands).__name__}" + (" of str" if isinstance(commands, list | tuple) else "")
    )


def _unique(keys: Sequence[bytes]) -> list[bytes]:
    return list(dict.fromkeys(keys))


def _keys_for(
    commands: Sequence[Command], explicit: Sequence[bytes], operation: str
) -> list[bytes]:
    """Every key the commands name, plus `explicit`; unknown commands need `explicit`."""
    found = list(explicit)
    unknown: list[str] = []
    for cmd in commands:
        keys = keys_of(cmd)
        if keys is None:
            unknown.append(str(cmd[0]))
        else:
            found.extend(keys)
    if unknown and not explicit:
        raise InvalidKeyError(
            f"{operation} cannot tell which keys {', '.join(sorted(set(unknown)))} touches; "
            "pass keys=[...] naming every key the commands use"
        )
    return found


async def multi(
    target: Target, commands: Sequence[Command], *, keys: Sequence[Key] = ()
) -> list[Any]:
    """Run `commands` in one MULTI/EXEC on the owner of their slot; returns their replies.

    The keys come from the commands themselves (see `keys_of`) plus `keys`; a
    command stampede does not know is allowed only when `keys` names its keys.
    Every key must share one slot: `CrossSlotError` before anything is sent
    otherwise. No command: nothing is sent and `[]` is returned. A command that
    fails inside EXEC raises `ShardResponseError`; as in Redis, the others applied
    (a command the server rejects while queuing aborts the whole block instead).

    Exactly once: when the connection drops before EXEC's reply, an operation
    marker tells whether the block applied. It is sent again only when it did not;
    when it did, `OutcomeUnknownError` says so (the block applied once, its
    replies are lost); when the shard cannot be asked, `OutcomeUnknownError`.
    Read-only blocks are simply sent again.
    """
    cmds = commands_of(commands, "multi() takes")
    if not cmds:
        return []
    topology = topology_of(target)
    named = _keys_for(cmds, key_list(keys, "multi()"), "multi()")
    common_slot(topology, named, "multi()")
    pack(cmds)  # an argument Redis cannot take: InvalidValueError before any I/O
    return await topology.transaction(_unique(named), cmds)


def _name_of(command: Sequence[Any]) -> str:
    head = command[0] if command else ""
    return repr(head.decode("utf-8", "replace") if isinstance(head, bytes) else str(head))


class Watched:
    """What a `watch()` function reads through: the watched connection, one slot.

    Reads of keys outside the watched slot raise `CrossSlotError`: on independent
    primaries they would silently read the wrong server.
    """

    def __init__(
        self, topology: Topology, watched: Sequence[bytes], slot: int, read: Read, attempt: int
    ) -> None:
        self._topology = topology
        self._watched = watched[0]
        self._slot = slot
        self._read = read
        self.attempt = attempt
        """1 on the first try, 2 after one lost race, and so on."""

    def _check(self, keys: Sequence[bytes], what: str) -> None:
        slots = {k: self._topology.slot_of(k) for k in keys}
        if any(s != self._slot for s in slots.values()):
            raise CrossSlotError({self._watched: self._slot, **slots}, operation=f"watch(): {what}")

    async def get(self, key: Key) -> bytes | None:
        """GET one key of the watched slot."""
        raw = to_bytes(key)
        self._check([raw], "GET")
        value: bytes | None = await self._read("GET", raw)
        return value

    async def mget(self, keys: Sequence[Key]) -> list[bytes | None]:
        """MGET keys of the watched slot, in order."""
        raw = key_list(keys, "watch(): MGET")
        if not raw:
            return []
        self._check(raw, "MGET")
        return list(await self._read("MGET", *raw))

    async def call(self, *command: Any) -> Any:
        """Any read command (HGETALL, ZRANGE, ...) on the watched connection.

        A command that writes is refused (`InvalidValueError`): it would run outside
        MULTI/EXEC, once per attempt; return it from the function instead.
        """
        if not read_only(command):
            raise InvalidValueError(
                f"watch(): tx.call({_name_of(command)}) is not a read: it would run outside "
                "MULTI/EXEC, once per attempt (and change what is watched); return the "
                "command from the function instead, where it runs atomically"
            )
        keys = keys_of(command)
        if keys:
            self._check(keys, str(command[0]))
        return await self._read(*command)


WatchFn: TypeAlias = Callable[
    [Watched], Awaitable[Sequence[Command] | None] | Sequence[Command] | None
]
"""`fn(tx)`: read through `tx`, return the commands to run atomically (None: none)."""


@dataclass(frozen=True, slots=True)
class WatchResult:
    """A `watch()` that went through: the EXEC replies and how many tries it took.

    `written` is False when the function returned None (it chose not to write).
    """

    results: list[Any] = field(default_factory=list)
    attempts: int = 1
    written: bool = True
    replies_lost: bool = False
    """True when the connection dropped before EXEC's reply but the operation marker
    shows the commands applied, exactly once; `results` is then empty."""


async def watch(
    target: Target,
    keys: Sequence[Key],
    fn: WatchFn,
    *,
    max_attempts: int = 16,
    base_delay: float = 0.001,
    max_delay: float = 0.05,
) -> WatchResult:
    """Optimistic read-modify-write: WATCH `keys`, let `fn` read and plan, MULTI/EXEC.

    `fn(tx)` (sync or async) reads through `tx` (`await tx.get(key)`) and returns
    the commands to run, or None to write nothing. When a watched key changes
    before EXEC, the attempt is discarded and `fn` runs again after a jittered
    backoff (uniform in `[0, min(max_delay, base_delay * 2**n)]`), so `fn` must
    not have side effects of its own. `WriteConflict` after `max_attempts`
    lost races; `CrossSlotError` before anything is sent when `keys` span slots,
    and before EXEC when the returned commands leave the slot (a command stampede
    cannot read the keys of, see `keys_of`, is refused: `InvalidKeyError`).

    Exactly once: when the reply to EXEC is lost, an operation marker tells
    whether the commands applied (`replies_lost=True`, `fn` is not run again) or
    can no longer apply (`fn` runs again); `OutcomeUnknownError` when the shard
    cannot be asked.
    """
    max_attempts = check_count(max_attempts, "watch()'s max_attempts")
    base_delay = check_seconds(base_delay, "watch()'s base_delay")
    max_delay = check_seconds(max_delay, "watch()'s max_delay")
    if not callable(fn):
        raise InvalidValueError(
            f"watch() needs fn, a function tx -> commands (or None), got {type(fn).__name__}"
        )
    topology = topology_of(target)
    watched = _unique(key_list(keys, "watch()"))
    slot = common_slot(topology, watched, "watch()")
    attempt = 0
    written = True

    async def body(read: Read) -> Sequence[Command] | None:
        nonlocal written
        planned = fn(Watched(topology, watched, slot, read, attempt))
        if inspect.isawaitable(planned):
            planned = await planned
        written = planned is not None
        if planned is None:
            return None
        cmds = commands_of(planned, "the function of watch() returns None or")
        found = [(c[0], keys_of(c)) for c in cmds]
        unknown = sorted({str(name) for name, keys in found if keys is None})
        if unknown:  # unchecked, it could write a key of another shard, out of reach
            raise InvalidKeyError(
                f"watch() cannot tell which keys {', '.join(unknown)} touches, so it cannot "
                "check they stay in the watched slot; return commands it knows (see "
                "atomic.keys_of), or run the write as a script with its keys declared"
            )
        common_slot(
            topology, [*watched, *(k for _, ks in found for k in ks or ())], "watch() commands"
        )
        return cmds

    for attempt in range(1, max_attempts + 1):  # `body` reads the current attempt
        try:
            ok, results = await topology.optimistic(watched, body)
        except RepliesLostError:
            return WatchResult([], attempt, written=True, replies_lost=True)
        if ok:
            return WatchResult(results, attempt, written=written)
        if attempt < max_attempts:
            await asyncio.sleep(backoff(attempt, base_delay, max_delay))
    label = ", ".join(k.decode("utf-8", "backslashreplace") for k in watched)
    raise WriteConflict(f"watch({label})", max_attempts)


class RegisteredScript:
    """A Lua script run atomically on the owner of its keys' slot.

    Call it with the keys it touches (all in one slot) and its arguments:
    `await reserve(st, keys=[...], args=[...])`. It runs with EVALSHA and falls
    back to EVAL when the server does not have it cached yet (NOSCRIPT), so
    servers that restarted or never saw it work without a separate load step.
    """

    sha: str
    """The SHA1 of the source, as EVALSHA and SCRIPT LOAD name it."""
    source: bytes
    """The Lua source."""

    def __init__(self, source: bytes | str, *, name: str | None = None) -> None:
        if not isinstance(source, bytes | str) or not source:
            raise InvalidValueError(
                f"a Lua script's source must be non-empty str or bytes, got {source!r:.40}"
            )
        self._script = Script(source)
        self.sha, self.source = self._script.sha, self._script.source
        self.name = name or f"script {self.sha[:12]}"

    async def __call__(
        self, target: Target, *, keys: Sequence[Key], args: Sequence[Any] = ()
    ) -> Any:
        """Run the script over `keys` (one slot) with `args`; returns its reply.

        `CrossSlotError` before anything is sent when the keys span slots; a Lua
        error (or `redis.error_reply`) raises `ShardResponseError` naming the shard.
        A script is never sent again after its reply was lost (Lua cannot be
        fenced): `OutcomeUnknownError` naming the script; read its keys to learn
        whether it ran.
        """
        topology = topology_of(target)
        raw = key_list(keys, f"Lua {self.name}")
        common_slot(topology, raw, f"Lua {self.name}")
        checked = [
            check_arg(a, f"args[{i}] of Lua {self.name}")
            for i, a in enumerate(listed(args, f"the args of Lua {self.name}", InvalidValueError))
        ]
        try:
            return await topology.script(self._script, raw, checked)
        except OutcomeUnknownError as exc:
            raise OutcomeUnknownError(f"Lua {self.name}", shard=exc.shard, cause=exc.cause) from exc

    def __repr__(self) -> str:
        return f"RegisteredScript({self.name!r}, sha={self.sha[:12]}...)"


def script(source: bytes | str, *, name: str | None = None) -> RegisteredScript:
    """Register a Lua script: `s = atomic.script(src)`, then `await s(st, keys=[...])`.

    Nothing is sent here; the first call loads the script on whichever shard runs it.
    Declare every key the script touches in `keys`: that is how the shard is
    chosen and how Redis Cluster checks the slot.
    """
    return RegisteredScript(source, name=name)
