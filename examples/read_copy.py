"""A tagged source of truth with an untagged read copy that can never go backwards.

The product's price and stock share the tag `{sku-7}` and are written as one
stamped group, atomically. Listing pages read a denormalised summary instead,
`catalog:listing:sku-7`: untagged, so it lands wherever its name hashes, away from
the source. The copy carries the stamp (version, token) of the source write it was
built from and is written through stampede's guard, so a slow refresher holding
an old build can never overwrite a newer copy, and a reader can tell exactly which
source write the copy reflects.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import _run

import stampede
from stampede import Envelope, GuardCode, fanout
from stampede.results import Receipt

GROUP = "catalog:products:{sku-7}"
PRICE, STOCK = f"{GROUP}:price", f"{GROUP}:stock"
COPY = "catalog:listing:sku-7"


async def refresh_copy(st: stampede.Stampede, receipt: Receipt, price: str, stock: str) -> int:
    """Write the summary under the source write's own stamp; returns WRITTEN or KEPT."""
    summary = json.dumps({"sku": "sku-7", "price": price, "in_stock": int(stock) > 0})
    value = Envelope(receipt.version, receipt.token, summary.encode()).encode()
    outcome = await st.topology.write_guarded(
        [COPY.encode()], [value], version=receipt.version, token=receipt.token
    )
    error = outcome.first_error()
    if error is not None:
        raise error
    return outcome.results[COPY.encode()]


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Write the source, refresh the copy (once too late), check what readers see."""
    async with stampede.connect(urls, cluster=cluster) as st:
        assert stampede.keyslot(COPY) != stampede.keyslot(PRICE)
        old = await st.write(GROUP, {PRICE: "12.00", STOCK: "3"})
        new = await st.write(GROUP, {PRICE: "9.50", STOCK: "2"})
        assert old.atomic and new.atomic

        assert await refresh_copy(st, new, "9.50", "2") == GuardCode.WRITTEN
        late = await refresh_copy(st, old, "12.00", "3")  # a slow refresher arrives last
        assert late == GuardCode.KEPT, "the guard keeps the newer copy"
        print("a stale refresh arrived late and was kept out by the guard")

        (copy,) = await fanout.mget_envelopes(st, [COPY])
        source = await st.read(GROUP, [PRICE, STOCK])
        assert copy is not None and source.consistent
        assert (copy.version, copy.token) == (source.version, source.token)
        assert json.loads(copy.payload)["price"] == "9.50"
        print(
            f"copy in slot {stampede.keyslot(COPY)} reflects source write "
            f"{copy.token} (slot {stampede.keyslot(PRICE)}): up to date"
        )

        newest = await st.write(GROUP, {PRICE: "9.00", STOCK: "0"})
        (copy,) = await fanout.mget_envelopes(st, [COPY])
        assert copy is not None and copy.version < newest.version
        print("after another source write the copy's stamp shows it is one write behind")
        await refresh_copy(st, newest, "9.00", "0")
        (summary,) = await fanout.mget(st, [COPY], decode=True)
        assert summary is not None and json.loads(summary)["in_stock"] is False


if __name__ == "__main__":
    _run.run(main, __doc__)
