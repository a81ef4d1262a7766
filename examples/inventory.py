"""Inventory reservation in Lua: stock, reserved and sold of one SKU never disagree.

`stock`, `reserved` and `sold` share the tag `{sku-9}`. Three scripts move units
between them: reserve (only if stock - reserved covers it), sell (reserved -> sold,
leaving stock) and release (reserved -> free). Each runs as one atomic step on the
SKU's shard, so 25 shoppers racing for 10 units reserve exactly 10 and the counts
add up afterwards: stock = initial - sold, 0 <= reserved <= stock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic

SKU = "shop:inventory:{sku-9}"
KEYS = [f"{SKU}:stock", f"{SKU}:reserved", f"{SKU}:sold"]

RESERVE = atomic.script(
    """
    local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
    local reserved = tonumber(redis.call('GET', KEYS[2]) or '0')
    local n = tonumber(ARGV[1])
    if stock - reserved < n then return 0 end
    redis.call('INCRBY', KEYS[2], n)
    return 1
    """,
    name="reserve",
)
SELL = atomic.script(
    """
    local n = tonumber(ARGV[1])
    if tonumber(redis.call('GET', KEYS[2]) or '0') < n then
      return redis.error_reply('SELL more units than are reserved')
    end
    redis.call('DECRBY', KEYS[2], n)
    redis.call('DECRBY', KEYS[1], n)
    return redis.call('INCRBY', KEYS[3], n)
    """,
    name="sell",
)
RELEASE = atomic.script(
    """
    local n = tonumber(ARGV[1])
    if tonumber(redis.call('GET', KEYS[2]) or '0') < n then
      return redis.error_reply('RELEASE more units than are reserved')
    end
    return redis.call('DECRBY', KEYS[2], n)
    """,
    name="release",
)


async def shopper(st: stampede.Stampede, n: int) -> str:
    """Reserve one unit; every third shopper changes their mind and releases it."""
    if not await RESERVE(st, keys=KEYS, args=[1]):
        return "sold out"
    if n % 3 == 0:
        await RELEASE(st, keys=KEYS, args=[1])
        return "released"
    await SELL(st, keys=KEYS, args=[1])
    return "bought"


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Race 25 shoppers for 10 units and check the counts add up."""
    async with stampede.connect(urls, cluster=cluster) as st:
        await atomic.multi(st, [("SET", KEYS[0], 10), ("SET", KEYS[1], 0), ("SET", KEYS[2], 0)])
        outcomes = await asyncio.gather(*(shopper(st, n) for n in range(25)))
        ((stock, reserved, sold),) = await atomic.multi(st, [("MGET", *KEYS)])
        stock, reserved, sold = int(stock), int(reserved), int(sold)
        bought = outcomes.count("bought")
        print(
            f"25 shoppers for 10 units: {bought} bought, {outcomes.count('released')} "
            f"released, {outcomes.count('sold out')} sold out"
        )
        assert sold == bought and stock == 10 - sold and reserved == 0
        assert bought + outcomes.count("released") >= 10, "every unit was reserved at least once"
        try:
            await SELL(st, keys=KEYS, args=[1])
        except stampede.ShardResponseError as exc:
            print(f"selling an unreserved unit is refused: {exc}")
        else:
            raise AssertionError("selling without a reservation must fail")
        print(f"final: stock {stock}, reserved {reserved}, sold {sold}")


if __name__ == "__main__":
    _run.run(main, __doc__)
