"""Read-atomic transactions: write any keys on any shards, in two rounds (RAMP-Fast).

```python
async with st.transaction() as tx:
    tx.set("user:{alice}:balance", b"90")
    tx.set("user:{bob}:balance", b"110")
tx.receipt
```

1. *Prepare*: every key's version hash stores the new version and the list of
   keys the transaction wrote, one call per shard, all shards at once. The data
   keys are not touched, so nothing is visible yet.
2. *Commit*, once every prepare was acknowledged (and within the transaction's
   timeout): each data key takes the new version where it is newer (the guard),
   keeping the value it replaces for the grace window.

A reader that meets a committed key of the transaction learns its siblings and
fetches exactly their prepared versions when it missed them, so it never returns
part of a transaction, even when the writer died between two commits. When every
key shares one slot, the transaction is one atomic server-side call.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from types import TracebackType
from typing import Any

from .. import tracing
from .._backoff import backoff
from .._write import (
    as_payload,
    check_version,
    fresher_limit,
    limit_for,
    plan_keys,
    raise_refusals,
)
from ..errors import (
    ClientClosedError,
    ConfigurationError,
    OutcomeUnknownError,
    ShardError,
    ShardResponseError,
    TransactionAborted,
)
from ..options import Durability, check_durability
from ..results import GuardCode, TransactionReceipt
from ..topology._base import call_units
from ..topology._retries import watch_losses
from ..typing import Topology, VersionSource
from ..versions import Counter
from ..wire import expire_at, new_token
from ..wire._txn import encode_meta
from .commit import GONE, commit_everywhere
from .scripts import COMMIT_ONE, PREPARE
from .units import Acks, run_units, sides_of

__all__ = ["PREPARE_HOLD_MS", "Transaction", "run_units"]

_LABEL = b"transaction"
_NOT_WRITTEN = int(GuardCode.WITHHELD)  # COMMIT_ONE: another key was refused
_SETTLED = (0, 1, 2, GONE)  # a reply that says what the key holds now
_COMMIT_TRIES = 4  # sends of a one-slot transaction whose outcome stays unknown
PREPARE_HOLD_MS = 3_600_000
"""How long a prepared version waits for its commit before it counts as abandoned."""


class Transaction:
    """Writes to any keys, made visible together (see the module notes).

    Use it as `async with st.transaction() as tx:`; the writes are sent when the
    block ends without an exception (an exception sends nothing), and
    `tx.receipt` tells what was committed.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        versions: VersionSource,
        ttl: float | None,
        grace: float,
        tombstone_grace: float,
        timeout: float,
        version: int | None = None,
        durability: Durability | None = None,
    ) -> None:
        if version is None and isinstance(versions, Counter):
            raise ConfigurationError(
                "a transaction's keys need versions ordered across keys: use the hybrid "
                "clock (the default) or pass version=, not versions='counter'"
            )
        self._topology = topology
        self._versions = versions
        self._ttl = ttl
        self._grace_ms = max(1, round(grace * 1000))
        self._tombstone_grace = tombstone_grace
        self._timeout = timeout
        self._version = None if version is None else check_version(version)
        durability = check_durability(durability)
        self._durability = (
            durability if durability and (durability.replicas or durability.aof) else None
        )
        self._writes: dict[bytes, bytes | None] = {}
        self._done = False
        self.receipt: TransactionReceipt | None = None

    def _key(self, key: bytes | str) -> bytes:
        if self._done:
            raise ConfigurationError("this transaction has ended; start a new one")
        (raw,) = plan_keys(_LABEL, [key])
        return raw

    def set(self, key: bytes | str, value: bytes | str) -> None:
        """Write `value` at `key` when the transaction commits (the last set wins)."""
        raw = self._key(key)
        self._writes[raw] = as_payload(raw, value)

    def delete(self, key: bytes | str) -> None:
        """Delete `key` when the transaction commits: a stamped tombstone."""
        self._writes[self._key(key)] = None

    @property
    def keys(self) -> list[bytes]:
        return list(self._writes)

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._done = True  # aborted: nothing was sent
            return
        if not self._done:  # (the block may have run `await tx.commit()` itself)
            await self.commit()

    async def commit(self) -> TransactionReceipt:
        """Prepare and commit every write; the receipt (also kept as `self.receipt`)."""
        with tracing.span("transaction", keys=len(self._writes)) as traced:
            receipt = await self._commit()
            traced.set(
                version=receipt.version,
                token=receipt.token,
                atomic=receipt.atomic,
                pending=len(receipt.pending),
            )
        return receipt

    async def _commit(self) -> TransactionReceipt:
        if self._done:
            raise ConfigurationError("this transaction has ended; start a new one")
        self._done = True
        topology = self._topology
        keys = list(self._writes)
        if not keys:  # nothing to write: no stamp is drawn, nothing is sent
            self.receipt = TransactionReceipt(0, "", ())
            return self.receipt
        if self._version is None:
            version = await self._versions.next_version(_LABEL, topology)
            limit = limit_for(self._versions, version)
        else:
            version, limit = self._version, 0
        token = new_token()
        head = b"%d:%s" % (version, token.encode())
        envs = [head if (p := self._writes[k]) is None else head + b":" + p for k in keys]
        at_data, at_gone = expire_at(self._ttl) or 0, expire_at(self._tombstone_grace) or 0
        ats = [at_gone if self._writes[k] is None else at_data for k in keys]
        sides = sides_of(topology, keys)
        meta = encode_meta(keys)
        acks = None if self._durability is None else Acks(self._durability)
        if len({topology.slot_of(k) for k in keys}) == 1:
            args = [(version, token, ats[i], limit, envs[i], meta) for i in range(len(keys))]
            codes = await self._commit_one_slot(keys, sides, args, acks)
            if fresh := fresher_limit(self._versions, version, limit, codes):
                args = [(*a[:3], fresh, *a[4:]) for a in args]
                codes = await self._commit_one_slot(keys, sides, args, acks)
            self.receipt = self._receipt(version, token, keys, codes, acks, atomic=True)
            return self.receipt
        started = time.monotonic()
        prepared_acks = None if self._durability is None else Acks(self._durability)
        units = call_units(topology, keys)  # the same calls in both rounds
        hold = [max(PREPARE_HOLD_MS, 10 * self._grace_ms)]
        prepare = partial(run_units, topology, PREPARE, head=hold)
        parts = list(zip(ats, envs, strict=True))
        tried = [(version, token, limit, at, e, meta) for at, e in parts]
        prepared = await prepare(keys, sides, tried, positions=units, acks=prepared_acks)
        if fresh := fresher_limit(self._versions, version, limit, prepared):
            tried = [(version, token, fresh, at, e, meta) for at, e in parts]
            prepared = await prepare(keys, sides, tried, positions=units, acks=prepared_acks)
        self._check_prepared(keys, prepared, prepared_acks)
        elapsed = time.monotonic() - started
        if elapsed > self._timeout:
            raise TransactionAborted(
                f"preparing took {elapsed:.3f} s, longer than the transaction timeout "
                f"({self._timeout} s); its prepared versions stay invisible",
                keys=keys,
            )

        async def prepare_again(positions: list[int]) -> list[Any]:
            """The prepare again, for the keys at `positions` only (the commit waits
            for replicas, if asked, after it)."""
            chosen = ([keys[i] for i in positions], [sides[i] for i in positions])
            return await prepare(*chosen, [tried[i] for i in positions])

        codes = await commit_everywhere(
            topology,
            keys,
            sides,
            [(version, token, ats[i]) for i in range(len(keys))],  # (COMMIT: three a key)
            acks=acks,
            units=units,
            grace_ms=self._grace_ms,
            seconds=self._timeout,
            prepare_again=prepare_again,
        )
        self.receipt = self._receipt(version, token, keys, codes, acks, atomic=False)
        return self.receipt

    async def _commit_one_slot(
        self,
        keys: list[bytes],
        sides: list[bytes],
        args: list[tuple[Any, ...]],
        acks: Acks | None,
    ) -> list[Any]:
        """The one-slot transaction: one all-or-nothing call, resent (it is idempotent)
        while its outcome is unknown; `OutcomeUnknownError` if it stays unknown."""
        everything = [list(range(len(keys)))]
        attempt = 0
        while True:
            with watch_losses() as lost:
                codes = await run_units(
                    self._topology,
                    COMMIT_ONE,
                    keys,
                    sides,
                    args,
                    head=[self._grace_ms],
                    positions=everything,
                    acks=acks,
                )
            error = next((c for c in codes if isinstance(c, ShardError)), None)
            if error is None:
                return codes
            refused = isinstance(error, ShardResponseError | ClientClosedError)
            if attempt == 0 and not lost.count and refused:
                # the server refused the call itself (or it was not sent: the client was
                # closed), the first time, and no reply was lost before (a resend refused
                # says nothing of the send it follows, which may have run): nothing ran
                raise TransactionAborted(
                    f"the one-slot call failed ({error})", keys=keys, cause=error
                ) from error
            attempt += 1
            if attempt >= _COMMIT_TRIES or isinstance(error, ClientClosedError):
                raise OutcomeUnknownError(
                    f"one-slot transaction of {len(keys)} key(s)",
                    shard=error.shard,
                    cause=error,
                    resent=True,
                ) from error
            await asyncio.sleep(backoff(attempt - 1, 0.02, 0.5))

    def _check_prepared(self, keys: list[bytes], codes: list[Any], acks: Acks | None) -> None:
        error = next((c for c in codes if isinstance(c, ShardError)), None)
        if error is not None:
            raise TransactionAborted(
                f"a prepare failed ({error}); its prepared versions stay invisible",
                keys=keys,
                cause=error,
            ) from error
        refused: dict[bytes, int] = {k: c for k, c in zip(keys, codes, strict=True) if c != 1}
        if refused:
            raise_refusals(_LABEL, refused)
        short = {} if acks is None else acks.short()
        if acks is not None and short:  # committed now, a failover could lose it
            shard, count = next(iter(short.items()))
            raise TransactionAborted(
                f"a prepare reached {count} of the {acks.wanted} replica(s) asked on shard "
                f"{shard} in time; nothing was committed (retry, or lower Durability)",
                keys=keys,
            )

    def _receipt(
        self,
        version: int,
        token: str,
        keys: list[bytes],
        codes: list[Any],
        acks: Acks | None,
        *,
        atomic: bool,
    ) -> TransactionReceipt:
        if atomic:
            refused = {k: c for k, c in zip(keys, codes, strict=True) if c < 0}
            if refused and set(refused.values()) != {_NOT_WRITTEN}:
                raise_refusals(_LABEL, {k: c for k, c in refused.items() if c != _NOT_WRITTEN})
        # After every prepare, the transaction is committed: a key whose commit failed
        # (or was refused by a race since its prepare) is pending; readers of
        # read_atomic still see its prepared version.
        pending = tuple(k for k, c in zip(keys, codes, strict=True) if c not in _SETTLED)
        return TransactionReceipt(
            version,
            token,
            tuple(keys),
            atomic=atomic,
            superseded=tuple(k for k, c in zip(keys, codes, strict=True) if c == 0),
            pending=pending,
            deleted=tuple(k for k in keys if self._writes[k] is None),
            replicas={} if acks is None else dict(acks.by_shard),
            durable=None if acks is None else self._durable(keys, acks),
        )

    def _durable(self, keys: list[bytes], acks: Acks) -> bool:
        """Every shard the transaction wrote acknowledged as many replicas as asked
        (False when the slot map, reloaded mid-failover, names no owner of a key: not
        confirmed, and the transaction is committed whatever it says)."""
        try:
            shards = {self._topology.shard_of(k) for k in keys}
        except ShardError:
            return False
        return not acks.short() and shards <= set(acks.by_shard)
