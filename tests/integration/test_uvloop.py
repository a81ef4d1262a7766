"""stampede on uvloop, the event loop uvicorn and many services run on.

uvloop's transports are not `asyncio.Transport` instances (they implement its
methods without subclassing it), and the transport's `connection_made` once checked
`isinstance(transport, asyncio.Transport)`: on uvloop every connection failed in
that callback, so no call ever got through. Each test here runs on a loop of
uvloop's own (`asyncio.Runner(loop_factory=uvloop.new_event_loop)`) against the
real servers: the plain paths of both topologies, a lost reply (the connection's
loss and the lane's retry rules), and a transaction's rounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import stampede
from stampede import Envelope, Stampede
from stampede.testing import RedisProxy

from ..support import FAST, open_stampede, spread_keys

uvloop = pytest.importorskip("uvloop", reason="uvloop does not build on this platform")


def on_uvloop(main: Callable[[], Awaitable[None]]) -> None:
    """Run `main()` to its end on a new uvloop event loop (and check it is one)."""

    async def checked() -> None:
        assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        await main()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(checked())


@pytest.mark.parametrize("kind", ["shards", "cluster"])
def test_the_plain_paths_on_uvloop(kind: str, request: pytest.FixtureRequest) -> None:
    env = request.getfixturevalue("stampede_cluster" if kind == "cluster" else "stampede_primaries")

    async def main() -> None:
        async with open_stampede(env, kind) as st:
            keys = spread_keys(st, "uv:g")
            await st.write("uv:g", {k: f"v:{k}".encode() for k in keys})
            read = await st.read("uv:g", keys)
            assert read.consistent and read.values == {k: f"v:{k}".encode() for k in keys}
            await st.write("uv:g", dict.fromkeys(keys, b"2"), mode="commit")
            assert (await st.read("uv:g", keys, mode="commit")).values == dict.fromkeys(keys, b"2")
            await asyncio.gather(  # coalesced: many requests per shard in one batch
                *(st.write(f"uv:b:{i}", {f"uv:b:{i}:{p}": b"x" for p in "ab"}) for i in range(64))
            )
            assert (await st.read("uv:b:7", ["uv:b:7:a", "uv:b:7:b"])).values["uv:b:7:a"] == b"x"
            tkeys = spread_keys(st, "uv:t")
            async with st.transaction() as tx:
                for k in tkeys:
                    tx.set(k, b"t")
            assert tx.receipt is not None
            assert (await st.read_atomic(tkeys)).values == dict.fromkeys(tkeys, b"t")
            await st.delete("uv:g", keys)
            assert not (await st.read("uv:g", keys)).found
            assert (await st.ping()).ok

    on_uvloop(main)


def test_a_lost_reply_on_uvloop(stampede_primaries: Any) -> None:
    """The guarded write's reply is lost (the proxy closes the connection after the
    server ran it): the write is resent (it is idempotent) and lands once."""

    async def main() -> None:
        proxies = [RedisProxy(node.address) for node in stampede_primaries.nodes]
        for proxy in proxies:
            await proxy.start()
        st: Stampede | None = None
        try:
            st = stampede.connect([p.url for p in proxies], connection=FAST)
            await st.open()
            key = "uv:lost:a"
            home = st.topology.shard_of(key.encode())
            proxy = next(p for p in proxies if p.url.endswith(home.rsplit(":", 1)[-1]))
            rule = proxy.drop_reply(lambda cmd: cmd[0].upper() == b"EVALSHA")
            receipt = await st.write("uv:lost", {key: b"once"})
            assert rule.hits == 1
            raw = await st.topology.execute(key.encode(), "GET", key)
            stored = Envelope.decode(raw)
            assert (stored.payload, stored.token) == (b"once", receipt.token)
        finally:
            if st is not None:
                await st.aclose()
            for proxy in proxies:
                await proxy.aclose()

    on_uvloop(main)
