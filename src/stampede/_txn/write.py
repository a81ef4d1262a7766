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
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from .. import tracing
from .._write import as_payload, check_version, limit_for, plan_keys, raise_refusals
from ..errors import ConfigurationError, ShardError, TransactionAborted
from ..results import TransactionReceipt
from ..topology._base import call_units
from ..typing import Topology, VersionSource
from ..versions import Counter
from ..wire import expire_at, new_token
from ..wire._txn import encode_meta, side_key
from .scripts import COMMIT, PREPARE

__all__ = ["Transaction", "run_units"]

_LABEL = b"transaction"


async def run_units(
    topology: Topology,
    script: Any,
    keys: Sequence[bytes],
    sides: Sequence[bytes],
    args: Sequence[Sequence[Any]],
    *,
    head: Sequence[Any] = (),
    positions: Sequence[Sequence[int]] | None = None,
) -> list[Any]:
    """Run `script` over (key, side) pairs, one call per unit, all at once.

    `args[p]` are the per-pair arguments of position p. Returns, per position, its
    reply entry, or the `ShardError` its call met.
    """
    groups = positions if positions is not None else call_units(topology, keys)

    async def one(group: Sequence[int]) -> Any:
        pairs = [k for p in group for k in (keys[p], sides[p])]
        argv = [*head, *(a for p in group for a in args[p])]
        return await topology.script(script, pairs, argv)

    replies = await asyncio.gather(*(one(g) for g in groups), return_exceptions=True)
    out: list[Any] = [None] * len(keys)
    for group, reply in zip(groups, replies, strict=True):
        if isinstance(reply, BaseException) and not isinstance(reply, ShardError):
            raise reply
        for i, p in enumerate(group):
            out[p] = reply if isinstance(reply, ShardError) else reply[i]
    return out


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
        if self._version is None:
            version = await self._versions.next_version(_LABEL, topology)
            limit = limit_for(self._versions, version)
        else:
            version, limit = self._version, 0
        token = new_token()
        keys = list(self._writes)
        if not keys:
            self.receipt = TransactionReceipt(version, token, ())
            return self.receipt
        head = b"%d:%s" % (version, token.encode())
        envs = [head if (p := self._writes[k]) is None else head + b":" + p for k in keys]
        at_data, at_gone = expire_at(self._ttl) or 0, expire_at(self._tombstone_grace) or 0
        ats = [at_gone if self._writes[k] is None else at_data for k in keys]
        sides = [side_key(k, topology.slot_of) for k in keys]
        meta = encode_meta(keys)
        if len({topology.slot_of(k) for k in keys}) == 1:
            args = [(version, token, ats[i], limit, envs[i], meta) for i in range(len(keys))]
            everything = [list(range(len(keys)))]
            codes = await run_units(
                topology, COMMIT, keys, sides, args, head=[self._grace_ms], positions=everything
            )
            self.receipt = self._receipt(version, token, keys, codes, atomic=True)
            return self.receipt
        started = time.monotonic()
        prepared = await run_units(
            topology,
            PREPARE,
            keys,
            sides,
            [(version, token, limit, ats[i], envs[i], meta) for i in range(len(keys))],
            head=[max(3_600_000, 10 * self._grace_ms)],
        )
        self._check_prepared(keys, prepared)
        elapsed = time.monotonic() - started
        if elapsed > self._timeout:
            raise TransactionAborted(
                f"preparing took {elapsed:.3f} s, longer than the transaction timeout "
                f"({self._timeout} s); its prepared versions stay invisible",
                keys=keys,
            )
        args = [(version, token, ats[i], 0, b"", b"") for i in range(len(keys))]
        codes = await run_units(topology, COMMIT, keys, sides, args, head=[self._grace_ms])
        failed = [i for i, c in enumerate(codes) if isinstance(c, ShardError)]
        if failed:  # committing is idempotent: one more try for the keys that failed
            again = await run_units(
                topology,
                COMMIT,
                [keys[i] for i in failed],
                [sides[i] for i in failed],
                [args[i] for i in failed],
                head=[self._grace_ms],
            )
            for i, code in zip(failed, again, strict=True):
                codes[i] = code
        self.receipt = self._receipt(version, token, keys, codes, atomic=False)
        return self.receipt

    def _check_prepared(self, keys: list[bytes], codes: list[Any]) -> None:
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

    def _receipt(
        self, version: int, token: str, keys: list[bytes], codes: list[Any], *, atomic: bool
    ) -> TransactionReceipt:
        error = next((c for c in codes if isinstance(c, ShardError)), None)
        if atomic and error is not None:
            raise TransactionAborted(f"the one-slot call failed ({error})", keys=keys, cause=error)
        if atomic:
            raise_refusals(_LABEL, {k: c for k, c in zip(keys, codes, strict=True) if c < 0})
        # After every prepare, the transaction is committed: a key whose commit failed
        # (or was refused by a race since its prepare) is pending; readers of
        # read_atomic still see its prepared version.
        pending = tuple(k for k, c in zip(keys, codes, strict=True) if c not in (0, 1, 2))
        return TransactionReceipt(
            version,
            token,
            tuple(keys),
            atomic=atomic,
            superseded=tuple(k for k, c in zip(keys, codes, strict=True) if c == 0),
            pending=pending,
            deleted=tuple(k for k in keys if self._writes[k] is None),
        )
