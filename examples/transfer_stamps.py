"""A transfer between two accounts that cannot be atomic, done with stamps instead.

Alice's and Bob's balances carry their own tags, so they live in different slots
(usually on different shards): no MULTI, WATCH or script can span them, and
stampede refuses to try, before sending anything. The transfer is one stamped
write over both keys (`st.write`, commit mode): every value carries one token,
the commit record comes last, and a read trusts the pair only when both halves
and the record agree. A writer that dies half-way leaves a pair that reads as
the last whole transfer while its keys keep it (the grace window), then as
torn, never as a plausible-looking balance. What stays torn is the repair
layer's job (a repair strategy on `read`, or the repair worker); here the
transfer is simply written again. Last, the same transfer as a read-atomic
transaction, which any set of keys can use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import _run

import stampede
from stampede import Envelope, atomic, eventlog
from stampede.testing import drop_kept

ALICE, BOB = "bank:accounts:{alice}:balance", "bank:accounts:{bob}:balance"
GROUP = "bank:transfers:alice-bob"
QUICK = stampede.RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.005, deadline=0.2)


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Refuse the atomic transfer, do it with stamps, detect a half-written one."""
    async with stampede.connect(urls, cluster=cluster) as st:
        try:
            await atomic.multi(st, [("DECRBY", ALICE, 10), ("INCRBY", BOB, 10)])
        except stampede.CrossSlotError as exc:
            print(f"atomic transfer refused: {exc.slots}")
        else:
            raise AssertionError("keys in two slots must not go into one MULTI")
        assert await st.topology.execute(ALICE.encode(), "EXISTS", ALICE) == 0, "nothing sent"

        opened = await st.write(GROUP, {ALICE: "100", BOB: "50"}, mode="commit")
        moved = await st.write(GROUP, {ALICE: "90", BOB: "60"}, mode="commit")
        assert not moved.atomic and moved.version > opened.version
        read = await st.read(GROUP, [ALICE, BOB], mode="commit")
        assert read.consistent and read.values == {ALICE: b"90", BOB: b"60"}
        print(f"transfer of 10 written with stamps: version {read.version}, token {read.token}")

        # A writer that crashes after Alice's half: her balance moves, Bob's does not,
        # and no commit record names the write.
        token = eventlog.new_token()
        version = moved.version + 1
        await st.topology.write_guarded(
            [ALICE.encode()],
            [Envelope(version, token, b"80").encode()],
            version=version,
            token=token,
        )
        last = await st.read(GROUP, [ALICE, BOB], mode="commit", retry=QUICK)
        assert last.consistent and last.values == {ALICE: b"90", BOB: b"60"}
        print("half-written transfer: reads as the last whole transfer, 90 and 60")
        await drop_kept(st.topology, [ALICE, BOB, f"{GROUP}:stampede:commit"])  # time passed
        try:
            await st.read(GROUP, [ALICE, BOB], mode="commit", retry=QUICK)
        except stampede.TornReadError as exc:
            print(f"half-written transfer detected ({exc.reason}): {exc.seen}")
        else:
            raise AssertionError("a half-written transfer must not read as consistent")

        await asyncio.sleep(0.002)  # the crashed write took this millisecond's next version
        again = await st.write(GROUP, {ALICE: "80", BOB: "70"}, mode="commit")
        read = await st.read(GROUP, [ALICE, BOB], mode="commit")
        assert read.consistent and read.token == again.token
        assert sum(int(v or 0) for v in read.values.values()) == 150, "money is conserved"
        print("rewritten whole: balances 80 and 70; total still 150")

        # The same kind of transfer as a read-atomic transaction: no group, any keys;
        # read_atomic never sees Alice debited without Bob credited.
        async with st.transaction() as tx:
            tx.set(ALICE, "60")
            tx.set(BOB, "90")
        both = await st.read_atomic([ALICE, BOB])
        assert both.values == {ALICE: b"60", BOB: b"90"}, both.values
        print(f"transaction: balances 60 and 90 in {both.rounds} round(s)")


if __name__ == "__main__":
    _run.run(main, __doc__)
