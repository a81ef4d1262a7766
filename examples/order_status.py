"""An order with line items, and an atomic status transition that keeps its history.

The order's keys share the tag `{1001}`. Adding a line item updates the item hash
and the total in one MULTI/EXEC, so no reader sees one without the other. A status
change is a Lua script: it checks the current status, sets the new one and appends
`<token>:<from>-><to>` to the status log (the `<key>:log` event-log format), all in
one step, so when five clerks race to mark the order paid exactly one succeeds and
the history records exactly one transition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic, eventlog

ORDER = "shop:orders:{1001}"
ITEMS, TOTAL, STATUS = f"{ORDER}:items", f"{ORDER}:total", f"{ORDER}:status"
HISTORY = eventlog.log_key(STATUS)  # shop:orders:{1001}:status:log

TRANSITION = atomic.script(
    """
    -- KEYS: status, status log. ARGV: from, to, token. Returns 1 if moved, 0 if refused.
    if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
    redis.call('SET', KEYS[1], ARGV[2])
    redis.call('RPUSH', KEYS[2], ARGV[3] .. ':' .. ARGV[1] .. '->' .. ARGV[2])
    return 1
    """,
    name="order-transition",
)


async def add_item(st: stampede.Stampede, sku: str, qty: int, cents: int) -> None:
    """Add a line item and its price to the total in one MULTI/EXEC."""
    await atomic.multi(st, [("HINCRBY", ITEMS, sku, qty), ("INCRBY", TOTAL, qty * cents)])


async def move(st: stampede.Stampede, old: str, new: str) -> bool:
    """Move the order from `old` to `new` status; False when it is not in `old`."""
    moved = await TRANSITION(st, keys=[STATUS, HISTORY], args=[old, new, eventlog.new_token()])
    return bool(moved)


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Create an order, add items, race five clerks, check the history."""
    async with stampede.connect(urls, cluster=cluster) as st:
        await atomic.multi(
            st,
            [
                ("SET", STATUS, "new"),
                ("SET", TOTAL, 0),
                ("RPUSH", HISTORY, eventlog.entry(eventlog.new_token(), "created")),
            ],
        )
        await asyncio.gather(add_item(st, "mug", 2, 1200), add_item(st, "tea", 3, 450))
        items, total = await atomic.multi(st, [("HGETALL", ITEMS), ("GET", TOTAL)])
        assert items == {b"mug": b"2", b"tea": b"3"} and total == b"3750"
        print(f"order {ORDER}: {len(items)} line items, total {int(total) / 100:.2f}")

        wins = await asyncio.gather(*(move(st, "new", "paid") for _ in range(5)))
        assert sum(wins) == 1, f"exactly one clerk moves new->paid, got {sum(wins)}"
        assert not await move(st, "new", "cancelled"), "a stale transition is refused"
        assert await move(st, "paid", "shipped")

        history = [e.change.decode() for e in await eventlog.read_log(st, STATUS)]
        assert history == ["created", "new->paid", "paid->shipped"], history
        print(f"5 racing clerks, 1 transition; history: {' | '.join(history)}")


if __name__ == "__main__":
    _run.run(main, __doc__)
