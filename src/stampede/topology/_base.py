"""The `Topology` protocol: where a key lives, and one round trip per shard.

Only topologies talk to Redis. Writer, reader and repair hand them whole plans
(every key of a group) and get back per-key results; each topology sends one
pipeline per shard, all shards at once, and translates redis-py errors into
`ShardError`s that name the shard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..errors import (
    ClientClosedError,
    ShardError,
    ShardResponseError,
    ShardTimeout,
    ShardUnavailable,
)
from ._resp import (
    AuthError,
    ClientClosed,
    ConnectionLost,
    NoPermissionError,
    RedisError,
    ReplyError,
    ReplyTimeout,
)

if TYPE_CHECKING:
    from .._lua import Script
    from ..keys import HashPolicy, SlotMap
    from ..typing import Topology
    from ._coalesce import Fanin

__all__ = [
    "READ_WATCH",
    "TRANSPORT_ERRORS",
    "FixedShards",
    "ReadWatch",
    "WriteOutcome",
    "call_units",
    "carried",
    "each_script",
    "guarded",
    "incr",
    "mapped",
    "settle",
    "translate",
    "translated",
    "unit_of",
]

T = TypeVar("T")


async def carried(work: Awaitable[T]) -> T:
    """`work`, run to its end even when the caller is cancelled meanwhile.

    The part of a write that must not stop half way (a write's floors once its
    guard landed, a cancelled write's wait for what its calls did): it runs in a
    task of its own, which the caller waits for however often it is cancelled, and
    only then does the caller's cancellation go on (a `CancelledError`, as it came).
    """
    task = asyncio.ensure_future(work)
    _CARRIED.add(task)  # (`settle` waits for it: closing the client does not cut it short)
    task.add_done_callback(_CARRIED.discard)
    stopped: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.cancelled():  # the task itself (the loop shutting down)
                raise
            stopped = exc
    if stopped is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the caller hears of its cancellation instead
        raise stopped
    return task.result()


_CARRIED: set[asyncio.Future[Any]] = set()
"""The work `carried` runs, until it ends."""


async def settle() -> None:
    """Wait until the work `carried` runs on this event loop has ended (a cancelled
    write's floors): `Stampede.aclose` calls it before it closes any connection."""
    loop = asyncio.get_running_loop()
    while mine := [t for t in _CARRIED if t.get_loop() is loop]:
        await asyncio.wait(mine)


class FixedShards:
    """`shard_names` and `slot_map` of a topology whose shards are fixed when it is
    built (`_names` in slot-range order, `_map`)."""

    _names: list[str]
    _map: SlotMap
    _policy: HashPolicy | None = None

    @property
    def shard_names(self) -> list[str]:
        return list(self._names)

    @property
    def policy(self) -> HashPolicy | None:
        """The `HashPolicy` keys are hashed with; None: hash tags, as on a cluster."""
        return self._policy

    @property
    def slot_map(self) -> SlotMap:
        return self._map

    async def scripts(
        self, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
    ) -> list[Any]:
        """Each call as one `script` call (one per shard already), all at once."""
        return await each_script(cast("Topology", self), script, calls)


@dataclass(slots=True)
class WriteOutcome:
    """Per-key results of a guarded write.

    `results[key]` is a guard code: `WRITTEN`, `SAME` (already there), `KEPT` (a
    newer write is stored), or a refusal (`MIXED`, `FUTURE`, `FOREIGN`: the
    stored value cannot be ordered against the write); keys of a shard that
    failed are in `failed` with that shard's error; `acks` what replicas took it.
    """

    results: dict[bytes, int] = field(default_factory=dict)
    failed: dict[bytes, ShardError] = field(default_factory=dict)
    acks: dict[str, int] = field(default_factory=dict)
    """With durability asked: shard -> replicas that acknowledged the write there
    (with `aof`, that fsynced it; 0 when the local fsync did not happen either)."""

    @property
    def ok(self) -> bool:
        return not self.failed

    def first_error(self) -> ShardError | None:
        return next(iter(self.failed.values()), None)


class ReadWatch:
    """What the read running in this context waits on, so a read past its deadline
    can name the shards that still owe an answer.

    A read with a deadline (`read_group`) sets one in `READ_WATCH`; a topology's
    fetch cancelled while its round trips are out records them (`waiting_on`), so a
    read cancelled by its deadline names them (one cancelled elsewhere names none:
    `waiting` is empty, and the read names its keys' shards).
    """

    # No __init__ (every read with a deadline makes one): the class's defaults stand
    # until `waiting_on`.
    _names: Sequence[str] = ()
    _fanin: Fanin | None = None

    def waiting_on(self, names: Sequence[str], fanin: Fanin | None = None) -> None:
        """A round trip to `names` (one per part of `fanin`, when given) is out."""
        self._names = names
        self._fanin = fanin

    @property
    def waiting(self) -> list[str]:
        """The shards whose answer this read still waits for, sorted."""
        fanin = self._fanin
        if fanin is None:
            return sorted(set(self._names))
        return sorted({self._names[i] for i in fanin.owed()})


READ_WATCH: ContextVar[ReadWatch | None] = ContextVar("stampede_read_watch", default=None)
"""The `ReadWatch` of the read running in this context, if any."""


Updater = Callable[[list[bytes | None]], Awaitable[list[bytes] | None]]


def translate(exc: BaseException, shard: str) -> ShardError:
    """The stampede error for a transport error on `shard` (messages carry no payloads).

    The one place where what the transport raises becomes a `ShardError`; the
    topologies reach it through `mapped` (a context manager) or `guarded`. Its
    `__cause__` is `exc`, also when it is returned rather than raised (a batch's
    per-key errors): a caller can tell a reply lost after the call was sent (the
    transport's `ConnectionLost`, `ReplyTimeout`) from a shard never reached.
    """
    if isinstance(exc, ShardError):
        return exc
    error = _translate(exc, shard)
    error.__cause__ = exc
    return error


def _translate(exc: BaseException, shard: str) -> ShardError:
    if isinstance(exc, ClientClosed):
        return ClientClosedError(str(exc), shard=shard)
    if isinstance(exc, AuthError):
        return ShardUnavailable(
            f"authentication failed ({exc}); authentication required; put user:password in "
            "the URL (redis://user:password@host:port, or redis://:password@host:port for "
            "the default user)",
            shard=shard,
        )
    if isinstance(exc, NoPermissionError):
        return ShardResponseError(
            f"the ACL user may not do this ({exc}); grant it what stampede needs "
            "(ACL SETUSER <user> +@read +@write +@scripting +@transaction +@connection "
            "+info ~*), or connect as another user",
            shard=shard,
        )
    if isinstance(exc, ReplyTimeout | TimeoutError):
        return ShardTimeout(
            "did not answer in time; it may be paused, overloaded or partitioned "
            "(raise socket_timeout if it is just slow)",
            shard=shard,
        )
    if isinstance(exc, ConnectionLost | ConnectionError | OSError):
        return ShardUnavailable(
            f"connection failed ({type(exc).__name__}: {exc}); is the server up and "
            "reachable at that address?",
            shard=shard,
        )
    if isinstance(exc, ReplyError):
        return ShardResponseError(f"server replied with an error: {exc}", shard=shard)
    return ShardError(f"{type(exc).__name__}: {exc}", shard=shard)


def translated(reply: Any, shard: str) -> Any:
    """A reply as is; an error reply as the `ShardError` naming `shard`."""
    return translate(reply, shard) if isinstance(reply, BaseException) else reply


TRANSPORT_ERRORS = (RedisError, OSError, TimeoutError)
"""What the transport raises (and `translate` turns into a `ShardError`)."""


@contextmanager
def mapped(shard: str) -> Iterator[None]:
    """Inside: a transport error becomes the `ShardError` naming `shard`."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise translate(exc, shard) from exc


async def guarded(shard: str, call: Callable[[], Awaitable[T]]) -> T:
    """Await `call()` with its transport errors mapped (see `mapped`)."""
    with mapped(shard):
        return await call()


async def each_script(
    topology: Topology, script: Script, calls: Sequence[tuple[Sequence[bytes], Sequence[Any]]]
) -> list[Any]:
    """`Topology.scripts` as one `script` call per (keys, args), all at once: per call
    its reply, or the `ShardError` it met."""
    replies = await asyncio.gather(
        *(topology.script(script, keys, args) for keys, args in calls), return_exceptions=True
    )
    for reply in replies:
        if isinstance(reply, BaseException) and not isinstance(reply, ShardError):
            raise reply
    return replies


def unit_of(topology: Topology, key: bytes) -> int | str:
    """Where `key` goes in a server call that may span one unit of `topology`: its
    slot when calls are slot-bound (a cluster), else its shard."""
    return topology.slot_of(key) if topology.slot_bound else topology.shard_of(key)


def call_units(topology: Topology, keys: Sequence[bytes]) -> list[list[int]]:
    """Positions of `keys` grouped so that each group can go in one server call (one
    script, one MULTI/EXEC): per shard over independent primaries, per slot on a
    cluster (`Topology.slot_bound`)."""
    groups: dict[object, list[int]] = {}
    for pos, key in enumerate(keys):
        groups.setdefault(unit_of(topology, key), []).append(pos)
    return list(groups.values())


async def incr(topology: Topology, key: bytes) -> int:
    """INCR one key. Resent after a lost reply: a counter (a version source) only has
    to grow, and a resent INCR leaves a gap, never a repeat."""
    return int(await topology.execute(key, "INCR", key, resend=True))
