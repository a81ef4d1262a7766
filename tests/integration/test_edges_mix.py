"""Group writes, deletes, transactions and repairs racing on the same keys, on both
topologies: whatever the interleaving, every key ends at the newest acknowledged
write that covered it (nothing lost, nothing clobbered), and a repair never puts a
key below one. Seeded, and judged on acknowledged stamps only: no timing."""

from __future__ import annotations

import asyncio
import random

from stampede import Envelope, RetryPolicy, Stampede, StampedeError
from stampede._kept import drop_kept
from stampede.repair import NewestWins
from stampede.topology._guard import KEEP_MS
from stampede.typing import GuardStamp
from stampede.wire import new_token

from ..support import raw_value, spread_keys

ONCE = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.001, deadline=5.0)
Stamp = tuple[int, str]


async def _stamp_at(st: Stampede, key: str) -> Stamp:
    raw = await raw_value(st, key)
    assert raw is not None, f"{key} lost"
    env = Envelope.decode(raw)
    return env.version, env.token


async def test_group_writes_deletes_and_transactions_end_at_the_newest(st: Stampede) -> None:
    """Rounds of 40 concurrent group writes, group deletes, transactions and
    transaction deletes over random subsets of three keys on different shards."""
    keys = spread_keys(st, "mixw", 3)
    acked: dict[str, list[Stamp]] = {k: [] for k in keys}
    rng = random.Random(7)

    async def one(i: int) -> None:
        which = rng.choice(["write", "delete", "tx", "txdel"])
        sub = rng.sample(keys, rng.randint(1, 3))
        if which == "write":
            receipt = await st.write("mixw", {k: b"w%d" % i for k in sub})
            stamp = (receipt.version, receipt.token)
        elif which == "delete":
            receipt = await st.delete("mixw", sub)
            stamp = (receipt.version, receipt.token)
        else:
            async with st.transaction() as tx:
                for k in sub:
                    if which == "txdel":
                        tx.delete(k)
                    else:
                        tx.set(k, b"t%d" % i)
            assert tx.receipt is not None and not tx.receipt.pending
            stamp = (tx.receipt.version, tx.receipt.token)
        for k in sub:
            acked[k].append(stamp)

    for _ in range(10):
        await asyncio.gather(*(one(i) for i in range(40)))
        for k in keys:
            assert await _stamp_at(st, k) == max(acked[k]), k


async def test_repairs_racing_writers_never_go_below_an_acknowledged_write(
    st: Stampede,
) -> None:
    """Rounds of 30 concurrent group writes, transactions, torn writes (one key, kept
    versions dropped) and reads repaired by NewestWins: a key never ends below the
    newest write acknowledged there."""
    keys = spread_keys(st, "mixr", 3)
    acked: dict[str, list[Stamp]] = {k: [(0, "")] for k in keys}
    rng = random.Random(11)

    async def tear() -> None:
        key = rng.choice(keys)
        version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
        stamp: GuardStamp = {"version": version, "token": token, "limit": 0, "keep_ms": KEEP_MS}
        value = b"%d:%s:torn" % (version, token.encode())
        await st.topology.write_guarded([key.encode()], [value], **stamp)
        await drop_kept(st.topology, keys)

    async def one(i: int) -> None:
        which = rng.choice(["write", "tx", "repair", "repair", "tear"])
        if which == "tear":
            await tear()
            return
        if which == "repair":
            try:
                await st.read("mixr", keys, retry=ONCE, repair=NewestWins())
            except StampedeError:
                pass  # torn again meanwhile, or a transaction still landing: fine
            return
        sub = keys if which == "write" else rng.sample(keys, rng.randint(1, 3))
        if which == "write":
            receipt = await st.write("mixr", {k: b"w%d" % i for k in sub})
            stamp = (receipt.version, receipt.token)
        else:
            async with st.transaction() as tx:
                for k in sub:
                    tx.set(k, b"t%d" % i)
            assert tx.receipt is not None
            stamp = (tx.receipt.version, tx.receipt.token)
        for k in sub:
            acked[k].append(stamp)

    for _ in range(15):
        await asyncio.gather(*(one(i) for i in range(30)))
        for k in keys:
            assert await _stamp_at(st, k) >= max(acked[k]), k
