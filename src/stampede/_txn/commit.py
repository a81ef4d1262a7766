"""The commit round of a transaction over several slots (`commit_everywhere`).

Every prepared key is committed, one call per unit, all at once; a call whose
connection failed is resent (the commit is idempotent) for up to the transaction
timeout. A commit that finds its prepared version gone (`-5`: lost in a failover
to a replica that had not received it, or evicted) while another key already
holds the transaction is prepared again and committed by the writer, which still
has every write: otherwise the transaction would be acknowledged with that key
missing for every reader, for good. When no key holds the transaction, the
outcome is decided by `check_unseen`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Container, Sequence
from functools import partial
from typing import Any

from .._backoff import backoff
from .._write import raise_refusals
from ..errors import ClientClosedError, OutcomeUnknownError, ShardError, TransactionAborted
from ..typing import Topology
from .scripts import COMMIT
from .units import Acks, run_units

__all__ = ["GONE", "LOST", "check_unseen", "commit_everywhere"]

GONE = 3  # COMMIT: the version's expiry instant had passed, nothing was written
LOST = -5  # COMMIT: the prepared version is gone (a failover, an eviction)
_HELD = (1, 2, GONE)  # a reply that says the key holds the transaction (or held it)
_LABEL = b"transaction"

Prepare = Callable[[list[int]], Awaitable[list[Any]]]
"""Prepares the keys at these positions again, as the first prepare did; their codes."""


async def commit_everywhere(
    topology: Topology,
    keys: list[bytes],
    sides: list[bytes],
    args: list[tuple[Any, ...]],
    *,
    acks: Acks | None,
    units: list[list[int]],
    grace_ms: int,
    seconds: float,
    prepare_again: Prepare,
) -> list[Any]:
    """Commit every prepared key (`units`: the calls, as `call_units` groups them),
    resending (idempotent) where a shard failed and preparing again, then committing,
    a key whose prepared version was lost while another key holds the transaction,
    for up to `seconds` (the transaction timeout). Once one key holds the transaction,
    readers and the sweep complete the rest; if none does, the outcome is unknown."""
    run = partial(run_units, topology, COMMIT, head=[grace_ms], acks=acks)
    codes = await run(keys, sides, args, positions=units)
    deadline = time.monotonic() + seconds
    attempt = 0
    resent: set[int] = set()  # keys whose reply was lost once: a later reply is no proof
    while True:
        failed = [i for i, c in enumerate(codes) if isinstance(c, ShardError)]
        held = any(c in _HELD for c in codes if not isinstance(c, ShardError))
        lost = [i for i, c in enumerate(codes) if c == LOST] if held else []
        if not (failed or lost) or time.monotonic() >= deadline:
            break
        if any(isinstance(codes[i], ClientClosedError) for i in failed):
            break  # the client was closed: nothing more can be sent
        resent.update(failed)
        await asyncio.sleep(backoff(attempt, 0.02, 1.0))
        attempt += 1
        if lost:
            # committed elsewhere, its version gone here: prepare it again, then
            # commit it below (a prepare that fails is resent as a commit, which
            # finds it gone again and comes back here; a refusal says why)
            for i, code in zip(lost, await prepare_again(lost), strict=True):
                if code == 1:
                    failed.append(i)
                else:
                    codes[i] = code
        if not failed:
            continue
        chosen = ([keys[i] for i in failed], [sides[i] for i in failed])
        again = await run(*chosen, [args[i] for i in failed])
        for i, code in zip(failed, again, strict=True):
            codes[i] = code
    if not any(c in _HELD for c in codes if not isinstance(c, ShardError)):
        error = next((c for c in codes if isinstance(c, ShardError)), None)
        if error is not None:
            raise OutcomeUnknownError(
                f"commit of a transaction of {len(keys)} key(s) (prepared everywhere, "
                "no commit acknowledged)",
                shard=error.shard,
                cause=error,
                resent=True,
            ) from error
        check_unseen(topology, keys, codes, resent)
    return codes


def check_unseen(
    topology: Topology, keys: Sequence[bytes], codes: Sequence[Any], resent: Container[int]
) -> None:
    """No key holds the transaction and a commit found no prepared version to make
    current (a failover or an eviction lost it since its prepare): nobody will ever
    see it, so no receipt. Aborted when that reply answered the first send; unknown
    when it answered a resend (the lost first one may have landed, and gone since)."""
    unseen = [i for i, c in enumerate(codes) if c != 0]  # 0: kept out by a newer value
    if not unseen:
        return  # superseded at every key, as a group write can be
    key = keys[unseen[0]]
    if any(i in resent for i in unseen):
        raise OutcomeUnknownError(
            f"commit of a transaction of {len(keys)} key(s) (a resend found no prepared "
            f"version at {key!r}, no commit acknowledged)",
            shard=_shard_name(topology, key),
            resent=True,
        )
    refused = {keys[i]: codes[i] for i in unseen if codes[i] != LOST}
    raise_refusals(_LABEL, refused)  # (a refusal says why: the key's type, its version)
    raise TransactionAborted(
        f"its prepared version was gone at commit at {key!r} (lost in a failover or "
        "evicted since its prepare) and no key holds it; retry the transaction",
        keys=list(keys),
    )


def _shard_name(topology: Topology, key: bytes) -> str:
    """The shard of `key`, or what the slot map says instead (a slot without an owner,
    mid-failover): an error must still be the one the outcome calls for."""
    try:
        return topology.shard_of(key)
    except ShardError as error:
        return error.shard
