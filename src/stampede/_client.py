"""`connect()` and `Stampede`: the object users hold."""

from __future__ import annotations

import difflib
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Self, TypedDict, TypeVar

from . import metrics, tracing
from ._health import ping
from ._read import read_group, traced_read
from ._txn import Transaction, read_atomic
from ._update import UpdateFn, update_group
from ._write import (
    check_version,
    payloads_of,
    plan_keys,
    planned_keys,
    traced_write,
    write_group,
)
from .errors import (
    ConfigurationError,
    InvalidKeyError,
    InvalidValueError,
    PartialWriteError,
)
from .keys import to_bytes
from .options import (
    Durability,
    Options,
    RetryPolicy,
    check_durability,
    check_strategy,
    resolve_versions,
)
from .results import AtomicRead, Health, ReadResult, Receipt
from .topology._base import settle
from .typing import RepairStrategy, Topology, VersionSource
from .verdict import Mode
from .wire import expire_at

__all__ = ["ReadOptions", "Stampede"]

K = TypeVar("K", bytes, str)
ModeName = Mode | Literal["stamp", "commit"]


class ReadOptions(TypedDict, total=False):
    """The per-call options of `Stampede.read`, for wrappers that pass them on
    (`TypedGroup.read(st, group, **options)`)."""

    mode: ModeName | None
    retry: RetryPolicy | None
    repair: RepairStrategy | None


class Stampede:
    """Stamped writes and validated reads over one `Topology`.

    Use as an async context manager (`async with stampede.connect(...) as st:`) or
    call `await st.open()` and `await st.aclose()` yourself.
    """

    def __init__(self, topology: Topology, *, options: Options | None = None) -> None:
        self.topology = topology
        self.options = options or Options()
        self._versions = self.options.version_source()
        self._keep: tuple[Options | None, int] = (None, 0)

    @property
    def versions(self) -> VersionSource:
        """The version source writes use unless a call names another."""
        return self._versions

    async def open(self) -> Self:
        """Check every shard before anything is written (`SetupError` if one is unfit).

        Each server must answer (credentials, ACL permissions and TLS included) and
        match the topology (a cluster node with `cluster=True`, a plain primary
        without); over primaries, no server may be listed twice and the URLs must
        agree with the shard identity records (see docs/operations.md). A cluster or
        Sentinel in the middle of a failover is waited for, within `failover_timeout`.
        `async with` calls it.
        """
        await self.topology.open()
        return self

    async def aclose(self) -> None:
        """Close every connection (batches in flight are answered first). A call still
        waiting then fails (`OutcomeUnknownError` for one that may have run), and no
        connection is opened again until `open()`: a call meanwhile raises
        `ClientClosedError` (nothing sent)."""
        await settle()  # a cancelled write's floors first, while its connections are open
        await self.topology.aclose()

    async def ping(self, *, within: float = 2.0) -> Health:
        """PING every shard at once (each within `within` seconds): its round trip or its
        error; never raises for a shard (`ConfigurationError` for a `within` that is no
        positive number). For a readiness endpoint: `(await st.ping()).ok`."""
        return await ping(self.topology, within)

    async def __aenter__(self) -> Self:
        try:
            return await self.open()
        except BaseException:
            await self.aclose()  # `async with` will not call __aexit__ for a failed enter
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _versions_for(self, versions: str | VersionSource | None) -> VersionSource:
        return self._versions if versions is None else resolve_versions(versions)

    async def write(
        self,
        group: bytes | str,
        values: Mapping[K, bytes | str],
        *,
        mode: ModeName | None = None,
        versions: Literal["hybrid", "counter"] | VersionSource | None = None,
        ttl: float | None = None,
        version: int | None = None,
        durability: Durability | None = None,
    ) -> Receipt:
        """Write every key of `group` as one logical write; returns its `Receipt`.

        `version` orders the write by the application's own version (a row
        version, an `updated_at`, a log position: 1..2**56-1) instead of the
        version source's, so a slow writer carrying older database state never
        replaces newer state, whichever reaches Redis first. `durability` (default:
        the `durability` option) waits until replicas have it; the receipt says
        what each shard acknowledged (`replicas`, `durable`).

        Raises `PartialWriteError` (`WriteTimeout` for a slow shard) naming the
        shard when only some keys were acknowledged; readers then see the group
        in flight or torn until it is written again or repaired. Bad keys or
        values raise before anything is sent.
        """
        gkey = _group(group)
        if type(values) is not dict and not isinstance(values, Mapping):
            raise InvalidValueError(
                f"values of group {group!r} must be a mapping of key -> bytes, got "
                f"{type(values).__name__}"
            )
        if not values:
            raise InvalidKeyError(f"write of group {group!r} has no values", key=group)
        keys = planned_keys(gkey, values)
        options = self.options
        mode_ = options.mode if mode is None else self._mode(mode)
        write = write_group(
            self.topology,
            gkey,
            keys,
            payloads_of(keys, values.values()),
            mode=mode_,
            versions=self._versions if versions is None else resolve_versions(versions),
            ttl=options.ttl if ttl is None else ttl,
            version=None if version is None else check_version(version),
            keep_ms=self._keep_ms,
            durability=self._durability(durability),
        )
        started = time.perf_counter()
        try:
            if tracing.recording():
                receipt = await traced_write(write, gkey, len(keys), mode_)
            else:
                receipt = await write
        except BaseException as exc:
            outcome = "partial" if isinstance(exc, PartialWriteError) else "error"
            metrics.write_latency(time.perf_counter() - started, outcome)
            raise
        metrics.write_latency(time.perf_counter() - started, "ok")
        return receipt

    async def delete(
        self,
        group: bytes | str,
        keys: Sequence[K],
        *,
        mode: ModeName | None = None,
        versions: Literal["hybrid", "counter"] | VersionSource | None = None,
        version: int | None = None,
        grace: float | None = None,
        durability: Durability | None = None,
    ) -> Receipt:
        """Delete every key of `group` as one logical write; returns its `Receipt`.

        Each key gets a stamped tombstone (and, in commit mode, the group its
        commit record), which the guard honours for `grace` seconds (default:
        the `tombstone_grace` option): a delayed or retried older write cannot
        bring the group back meanwhile. A read of the tombstones is `not_found`.
        """
        gkey = _group(group)
        planned = plan_keys(gkey, keys)
        if not keys:
            raise InvalidKeyError(f"delete of group {group!r} names no keys", key=group)
        if grace is not None:
            expire_at(grace, "grace")  # refused naming `grace`, not a ttl
        return await write_group(
            self.topology,
            gkey,
            planned,
            [None] * len(planned),
            mode=self._mode(mode),
            versions=self._versions_for(versions),
            ttl=self.options.tombstone_grace if grace is None else grace,
            version=None if version is None else check_version(version),
            keep_ms=self._keep_ms,
            durability=self._durability(durability),
        )

    def _durability(self, durability: Durability | None) -> Durability | None:
        """A call's `durability=`, or the option's; `ConfigurationError` for another kind
        of value, before anything is sent."""
        if durability is None:
            return self.options.durability
        return check_durability(durability)

    @property
    def _keep_ms(self) -> int:
        """How long a write keeps each value it replaces (`version_grace`), in ms."""
        if self._keep[0] is not self.options:  # worked out once per `options`
            self._keep = (self.options, max(1, round(self.options.version_grace * 1000)))
        return self._keep[1]

    def _mode(self, mode: ModeName | None) -> Mode:
        if mode is None:
            return self.options.mode
        try:
            return Mode(mode)
        except (ValueError, TypeError):
            names = [m.value for m in Mode]
            close = difflib.get_close_matches(str(mode), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigurationError(
                f"mode must be 'stamp' or 'commit' (or stampede.Mode), got {mode!r}{hint}"
            ) from None

    async def read(
        self,
        group: bytes | str,
        keys: Sequence[K],
        *,
        mode: ModeName | None = None,
        retry: RetryPolicy | None = None,
        repair: RepairStrategy | None = None,
    ) -> ReadResult[K]:
        """Read every key of `group` in one round trip per shard and judge it.

        Returns a consistent (or not-found) result; retries with backoff while a
        write may be in flight; a group that stays torn goes to `repair` (or the
        default strategy) and otherwise raises `TornReadError` with what was seen.
        """
        gkey = _group(group)
        keys = _listed(keys, f"the keys of group {group!r}")
        planned = planned_keys(gkey, keys)
        if not keys:
            raise InvalidKeyError(f"read of group {group!r} names no keys", key=group)
        if retry is not None and not isinstance(retry, RetryPolicy):
            hint = "RetryPolicy()" if retry is RetryPolicy else "stampede.RetryPolicy(...)"
            raise ConfigurationError(
                f"retry must be a RetryPolicy instance, got {kind_name(retry)}; pass e.g. {hint}"
            )
        if repair is not None:
            check_strategy(repair, "repair")
        options = self.options
        policy = retry or options.retry
        mode_ = options.mode if mode is None else self._mode(mode)
        read = read_group(
            self.topology,
            gkey,
            list(keys),
            planned,
            mode=mode_,
            retry=policy,
            repair=repair if repair is not None else options.repair,
            versions=self._versions,
            ttl=options.ttl,
            grace=options.tombstone_grace,
            version_grace=options.version_grace,
        )
        if tracing.recording():  # else no span, and no attributes to name
            return await traced_read(read, gkey, len(planned), mode_)
        return await read

    async def update(
        self,
        group: bytes | str,
        keys: Sequence[K],
        fn: UpdateFn[K],
        *,
        mode: ModeName | None = None,
        ttl: float | None = None,
        max_attempts: int = 16,
    ) -> Receipt:
        """Optimistic read-modify-write of a co-located group (WATCH, MULTI/EXEC).

        `fn(current)` maps each key to its current payload (None when missing) and
        returns the new payload of every key; it may run several times when other
        writers race. Keys in different slots raise `CrossSlotError` before anything
        is sent; `WriteConflict` after `max_attempts` lost races.
        """
        gkey = _group(group)
        plan_keys(gkey, keys)  # a str for the keys, a key named twice: refused here
        if not keys:
            raise InvalidKeyError(f"update of group {group!r} names no keys", key=group)
        if not callable(fn):
            raise InvalidValueError(
                f"update of group {group!r} needs fn, a function current -> new values, "
                f"got {kind_name(fn)}"
            )
        return await update_group(
            self.topology,
            gkey,
            list(keys),
            fn,
            mode=self._mode(mode),
            versions=self._versions,
            ttl=self.options.ttl if ttl is None else ttl,
            max_attempts=max_attempts,
        )

    def transaction(
        self,
        *,
        ttl: float | None = None,
        versions: Literal["hybrid"] | VersionSource | None = None,
        version: int | None = None,
        durability: Durability | None = None,
    ) -> Transaction:
        """A read-atomic transaction over any keys: `async with st.transaction() as tx:`.

        `tx.set(key, value)` and `tx.delete(key)` inside the block; on a clean exit
        every write is prepared, then committed, and `tx.receipt` tells the result.
        `read_atomic` never returns part of it (Read Atomic isolation). It is not
        serializable: two transactions writing the same key do not conflict, the
        newer stamp wins (use `update()` for read-modify-write). `durability`
        (default: the option) makes every prepare and commit wait for replicas: a
        prepare short of them aborts it, a commit short of them flags the receipt.
        """
        return Transaction(
            self.topology,
            versions=self._versions_for(versions),
            ttl=self.options.ttl if ttl is None else ttl,
            grace=self.options.version_grace,
            tombstone_grace=self.options.tombstone_grace,
            timeout=self.options.transaction_timeout,
            version=version,
            durability=self._durability(durability),
        )

    async def read_atomic(self, keys: Sequence[K], *, attempts: int = 3) -> AtomicRead[K]:
        """Read any keys so that no transaction is seen in part: one round trip per
        shard, two when a transaction's sibling was missed (`result.rounds`)."""
        keys = _listed(keys, "read_atomic()'s keys")
        with tracing.span("read_atomic", keys=len(keys)) as traced:
            result = await read_atomic(
                self.topology,
                keys,
                attempts=attempts,
                grace=self.options.version_grace,
                versions=self._versions,
            )
            traced.set(rounds=result.rounds, attempts=result.attempts)
        return result


def kind_name(value: object) -> str:
    """How a wrong argument is named in a message: its type, never its content."""
    if isinstance(value, type):
        return f"the class {value.__name__} (not an instance of it)"
    return f"a value of type {type(value).__name__}"


def _listed(keys: Sequence[K], what: str) -> Sequence[K]:
    """`keys` as given when it is a collection (a str or bytes is refused later);
    a generator's keys as a list, read once; `InvalidKeyError` for no iterable."""
    if isinstance(keys, Collection):
        return keys
    try:
        return list(keys)
    except TypeError:
        raise InvalidKeyError(
            f"{what} must be a list of key names, got {kind_name(keys)}", key=None
        ) from None


def _group(group: bytes | str) -> bytes:
    gkey = to_bytes(group) if isinstance(group, bytes | str) else None
    if gkey:
        return gkey
    problem = "is empty" if gkey is not None else f"must be str or bytes, got {kind_name(group)}"
    raise InvalidKeyError(f"the group name {problem}; name the entity, e.g. 'user:{{42}}'")
