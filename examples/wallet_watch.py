"""A balance/pending update under WATCH: optimistic locking with retries.

`balance` and `pending` share the tag `{alice}`. A hold moves money from balance to
pending only if the balance covers it; the decision needs a read first, so it
runs as WATCH -> read -> MULTI/EXEC with `atomic.watch`, which re-runs the function
(after a jittered backoff) whenever another writer changed a watched key in
between. Thirty racing holds of 5 on a balance of 100: exactly twenty go through,
no money appears or disappears, and some holds had to retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic

BALANCE, PENDING = "bank:wallets:{alice}:balance", "bank:wallets:{alice}:pending"


async def hold(st: stampede.Stampede, amount: int) -> atomic.WatchResult:
    """Move `amount` from balance to pending if the balance covers it (WATCH, retried)."""

    async def plan(tx: atomic.Watched) -> list[atomic.Command] | None:
        balance, pending = (int(v or 0) for v in await tx.mget([BALANCE, PENDING]))
        if balance < amount:
            return None  # declined: nothing is written
        await asyncio.sleep(0)  # let the others interleave, as real work would
        return [("SET", BALANCE, balance - amount), ("SET", PENDING, pending + amount)]

    return await atomic.watch(st, [BALANCE, PENDING], plan, max_attempts=200)


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Race 30 holds of 5 on a balance of 100 and check nothing is lost."""
    async with stampede.connect(urls, cluster=cluster) as st:
        await atomic.multi(st, [("SET", BALANCE, 100), ("SET", PENDING, 0)])
        results = await asyncio.gather(*(hold(st, 5) for _ in range(30)))
        ((balance, pending),) = await atomic.multi(st, [("MGET", BALANCE, PENDING)])
        accepted = sum(r.written for r in results)
        retries = sum(r.attempts - 1 for r in results)
        print(
            f"30 holds of 5 on 100: {accepted} accepted, {30 - accepted} declined, "
            f"{retries} retries after lost races"
        )
        assert accepted == 20 and (int(balance), int(pending)) == (0, 100)
        try:
            await atomic.watch(st, [BALANCE, "bank:wallets:{bob}:balance"], lambda tx: None)
        except stampede.CrossSlotError as exc:
            print(f"watching two wallets is refused before sending: {exc.slots}")
        else:
            raise AssertionError("keys of two wallets must not share a WATCH")
        print(f"balance {int(balance)}, pending {int(pending)}: nothing lost or created")


if __name__ == "__main__":
    _run.run(main, __doc__)
