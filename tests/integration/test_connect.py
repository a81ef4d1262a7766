"""`open()` checks the servers; `max_connections` caps every shard; a read's deadline holds.

Each set-up mistake fails at `open()` with a `SetupError` of its own, naming the
URL and the fix, before anything is written. Real servers throughout.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

import stampede
from stampede import ConnectOptions, RetryPolicy, SetupError, Shards
from stampede._lua import Script
from stampede._txn.scripts import COMMIT
from stampede.errors import ClientClosedError
from stampede.testing import LocalCluster, LocalPrimaries, RedisNode
from stampede.testing.faults import DelegatingTopology
from stampede.topology._checks import IDENTITY_KEY

from ..support import FAST, eventually, open_stampede, run_cli, spread_keys


@pytest.fixture
def primaries(stampede_primaries: LocalPrimaries) -> Iterator[LocalPrimaries]:
    """The shared primaries, emptied before and after (identity records included)."""
    stampede_primaries.heal()
    stampede_primaries.flushall()
    yield stampede_primaries
    stampede_primaries.heal()
    stampede_primaries.flushall()


@pytest.fixture
def secured() -> Iterator[RedisNode]:
    """A server of its own with a password and a limited ACL user."""
    with RedisNode() as node:
        node.client().config_set("requirepass", "s3cret")  # the harness pings unauthenticated
        admin = node.client(password="s3cret")
        admin.acl_setuser("blind", enabled=True, passwords=["+pw"], keys=["*"], commands=["+ping"])
        try:
            yield node
        finally:
            admin.config_set("requirepass", "")


async def refused(urls: str | list[str], **kwargs: Any) -> SetupError:
    """The `SetupError` that opening `urls` raises (the client is closed either way)."""
    kwargs.setdefault("connection", FAST)
    st = stampede.connect(urls, **kwargs)
    try:
        with pytest.raises(SetupError) as info:
            await st.open()
    finally:
        await st.aclose()
    return info.value


async def test_a_wrong_password_is_refused_at_open(secured: RedisNode) -> None:
    """Bad or missing credentials name the URL (password hidden) and say to put them in it."""
    err = await refused(f"redis://:wrong@{secured.address}")
    assert err.problem == "auth" and err.url == f"redis://:***@{secured.address}"
    assert "put user:password in the URL" in str(err) and "wrong" not in str(err)
    assert "reachable" not in str(err)
    err = await refused(secured.url)
    assert err.problem == "auth" and "authentication required" in str(err)
    async with stampede.connect(f"redis://:s3cret@{secured.address}", connection=FAST) as st:
        await st.write("g", {"g:a": b"1"})
        assert (await st.read("g", ["g:a"])).consistent


async def test_an_acl_user_without_info_is_refused(secured: RedisNode) -> None:
    """An ACL user that may not run what open() asks is told what to grant."""
    err = await refused(f"redis://blind:pw@{secured.address}")
    assert err.problem == "permission" and "ACL SETUSER" in str(err)
    assert err.url == f"redis://blind:***@{secured.address}"


async def test_a_down_shard_is_refused_at_open(primaries: LocalPrimaries) -> None:
    """A shard nobody listens on is named by its URL, before anything is written."""
    node = RedisNode()
    node.start()
    dead = node.url
    node.stop()
    err = await refused([*primaries.urls, dead])
    assert err.problem == "unreachable" and err.url == dead and "is the server up" in str(err)
    for live in primaries.nodes:  # nothing written anywhere, identity records included
        assert live.client().dbsize() == 0


async def test_a_cluster_node_without_cluster_true_is_refused(
    stampede_cluster: LocalCluster,
) -> None:
    """A cluster node listed as a primary would answer MOVED; open() says cluster=True."""
    err = await refused([stampede_cluster.url])
    assert err.problem == "cluster-node" and "cluster=True" in str(err)
    assert err.url == stampede_cluster.url


async def test_cluster_true_against_a_plain_server_is_refused(primaries: LocalPrimaries) -> None:
    """cluster=True against a plain primary says to list the primaries instead."""
    err = await refused(primaries.urls[0], cluster=True)
    assert err.problem == "not-cluster" and "drop cluster=True" in str(err)
    assert err.url == primaries.urls[0]


async def test_two_urls_that_reach_one_server_are_refused(primaries: LocalPrimaries) -> None:
    """The same server under two URLs (here: two databases) is found by its run_id."""
    first = primaries.nodes[0]
    twice = [f"redis://{first.address}/0", primaries.urls[1], f"redis://{first.address}/1"]
    err = await refused(twice)
    assert err.problem == "same-server" and err.url == twice[2]
    assert twice[0] in str(err) and "list each primary once" in str(err)


async def test_a_database_the_server_lacks_is_refused_as_such(primaries: LocalPrimaries) -> None:
    """`/99` on a server with 16 databases is a URL mistake (`problem="database"`), not
    an unreachable server: the CLI exits 1 at once instead of 3 ("cannot be reached"),
    and the worker does not retry it as a server that is down."""
    url = f"redis://{primaries.nodes[0].address}/99"
    err = await refused(url)
    assert err.problem == "database" and err.url == url
    assert "no database 99" in str(err) and "/0 to /15" in str(err)
    for args in (
        ["queue", "stats"],
        ["worker", "--strategy", "newest-wins", "--burst", "--connect-attempts", "2"],
    ):
        cli = await asyncio.to_thread(run_cli, *args, "--url", url)
        text = cli.stderr.decode()
        assert cli.returncode == 1, text
        assert "no database 99" in text and "no server answered" not in text, text


async def test_a_password_for_a_server_without_one_says_to_drop_it(
    primaries: LocalPrimaries,
) -> None:
    """`redis://:pw@host` against a server with no password: the advice was to put
    user:password in the URL, which is what was done; it now says to drop it."""
    url = f"redis://:pw@{primaries.nodes[0].address}"
    err = await refused(url)
    assert err.problem == "auth" and "the server has none" in str(err), err
    assert "drop it (redis://host:port)" in str(err) and "pw@" not in str(err)


async def test_rediss_to_a_plain_port_is_refused(primaries: LocalPrimaries) -> None:
    """TLS against a plain port: use redis://, or the server's tls-port."""
    url = f"rediss://{primaries.nodes[0].address}"
    err = await refused(url, connection=ConnectOptions(connect_timeout=0.5, socket_timeout=0.5))
    assert err.problem == "tls" and err.url == url and "use redis://" in str(err)


async def test_the_identity_record_is_the_compact_json_the_wire_format_names(
    primaries: LocalPrimaries,
) -> None:
    """wire-formats.md, shard identity record: compact JSON with format, shard, shards,
    topology (one ULID for every primary), layout (16 hex digits) and written_at, in
    that order; another hash_pattern than the one it was written with is refused."""
    before = int(time.time() * 1000)
    async with stampede.connect(primaries.urls, connection=FAST) as st:
        await st.write("g", {"g:a": b"x"})
    raws = [node.client().get(IDENTITY_KEY) for node in primaries.nodes]
    records = [json.loads(raw) for raw in raws]  # type: ignore[arg-type]
    for place, (raw, record) in enumerate(zip(raws, records, strict=True)):
        assert raw == json.dumps(record, separators=(",", ":")).encode()
        assert list(record) == ["format", "shard", "shards", "topology", "layout", "written_at"]
        assert (record["format"], record["shard"], record["shards"]) == (1, place, 3)
        assert re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", record["topology"])
        assert re.fullmatch(r"[0-9a-f]{16}", record["layout"])
        assert before <= record["written_at"] <= int(time.time() * 1000)
    assert len({(r["topology"], r["layout"]) for r in records}) == 1
    err = await refused(primaries.urls, hash_pattern=r"^(?P<tag>[^:]+):")
    assert "another slot map or hash_pattern" in str(err)


async def test_urls_in_another_order_are_refused(primaries: LocalPrimaries) -> None:
    """The identity records written by the first open() refuse a reordered or shortened list."""
    urls = primaries.urls
    async with stampede.connect(urls, connection=FAST) as st:
        await st.write("user:{1}", {"user:{1}:a": b"x"})
    for node in primaries.nodes:
        assert node.client().exists(IDENTITY_KEY) == 1
    swapped = [urls[1], urls[0], urls[2]]
    err = await refused(swapped)
    assert err.problem == "order" and err.url == urls[1]
    assert f"List them as: {', '.join(urls)}." in str(err) and "check_identity=False" in str(err)
    err = await refused(urls[:2])
    assert err.problem == "count" and "of 3" in str(err)
    # the same order opens again, any number of times
    async with stampede.connect(urls, connection=FAST) as st:
        assert (await st.read("user:{1}", ["user:{1}:a"])).consistent


async def test_reshard_accepts_a_new_order_explicitly(primaries: LocalPrimaries) -> None:
    """check_identity=False opens anyway; write_identity() makes the new order the one checked."""
    urls = primaries.urls
    async with stampede.connect(urls, connection=FAST):
        pass
    moved = [urls[2], urls[0], urls[1]]
    loose = FAST.model_copy(update={"check_identity": False})
    async with stampede.connect(moved, connection=loose) as st:
        assert isinstance(st.topology, Shards)
        await st.topology.write_identity()
    async with stampede.connect(moved, connection=FAST):
        pass
    assert (await refused(urls)).problem == "order"


async def test_a_different_slot_map_is_refused(primaries: LocalPrimaries) -> None:
    """The same servers under another hash pattern would route keys elsewhere."""
    async with stampede.connect(primaries.urls, connection=FAST):
        pass
    err = await refused(primaries.urls, hash_pattern=r"^(?P<tag>[^:]+)")
    assert err.problem == "layout" and "hash_pattern" in str(err)


async def test_concurrent_first_opens_agree(primaries: LocalPrimaries) -> None:
    """Two processes opening fresh servers at once write one identity, not two."""
    clients = [stampede.connect(primaries.urls, connection=FAST) for _ in range(4)]
    try:
        await asyncio.gather(*(c.open() for c in clients))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    ids = {node.client().get(IDENTITY_KEY) for node in primaries.nodes}
    assert len(ids) == 3  # one record per shard (they differ by index), all of one topology
    async with stampede.connect(primaries.urls, connection=FAST):
        pass


async def test_misrouted_keys_are_found(primaries: LocalPrimaries) -> None:
    """`Shards.misrouted` names keys a server holds but does not route to (for `scan`)."""
    async with stampede.connect(primaries.urls, connection=FAST) as st:
        topology = st.topology
        assert isinstance(topology, Shards)
        key = b"user:{5}:profile"
        home = topology.shard_of(key)
        stray = next(n for n in primaries.nodes if n.address != home)
        stray.client().set(key, b"x")
        for node in primaries.nodes:
            found = [bytes(k) for k in node.client().scan_iter()]
            expected = [key] if node is stray else []
            assert topology.misrouted(node.address, found) == expected


# -- max_connections -------------------------------------------------------------------


def _named(node: RedisNode, name: str) -> int:
    return sum(1 for c in node.client().client_list() if c.get("name") == name)


@pytest.fixture
async def capped(topology_env: tuple[str, Any]) -> AsyncIterator[tuple[Any, list[RedisNode], str]]:
    kind, env = topology_env
    yield env, list(env.nodes), kind


async def test_max_connections_caps_every_shard(
    capped: tuple[Any, list[RedisNode], str],
) -> None:
    """Under 200 concurrent operations, CLIENT LIST never shows more than the cap per shard."""
    env, nodes, kind = capped
    name = f"capped-{kind}"
    cap = 4
    options = ConnectOptions(max_connections=cap, coalesce=False, socket_timeout=10)
    if kind == "cluster":
        st = stampede.connect(f"{env.url}?client_name={name}", cluster=True, connection=options)
    else:
        st = stampede.connect([f"{u}?client_name={name}" for u in env.urls], connection=options)
    peak: dict[str, int] = {}
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            for node in nodes:
                seen = await asyncio.to_thread(_named, node, name)
                peak[node.address] = max(peak.get(node.address, 0), seen)

    async with st:
        groups = [f"order:{{{i % 9}}}" for i in range(100)]
        sampler = asyncio.create_task(sample())
        await asyncio.gather(*(st.write(g, {f"{g}:{i}": b"v"}) for i, g in enumerate(groups)))
        await asyncio.gather(*(st.read(g, [f"{g}:{i}"]) for i, g in enumerate(groups)))
        done.set()
        await sampler
        after = {node.address: _named(node, name) for node in nodes}
    assert max(after.values()) <= cap, after
    assert max(peak.values()) <= cap, peak


# -- a read's deadline -----------------------------------------------------------------


async def test_a_read_deadline_bounds_a_paused_shard(primaries: LocalPrimaries) -> None:
    """A read against a paused shard raises ReadTimeout naming it at its deadline,
    not after the (here very long) socket timeout."""
    slow = ConnectOptions(socket_timeout=30, connect_timeout=1, connection_retries=0)
    async with open_stampede(primaries, "shards", connection=slow) as st:
        keys = spread_keys(st, "user:7")
        await st.write("user:7", dict.fromkeys(keys, b"v"))
        home = st.topology.shard_of(keys[0].encode())
        paused = next(n for n in primaries.nodes if n.address == home)
        paused.pause()
        try:
            started = time.monotonic()
            with pytest.raises(stampede.ReadTimeout) as info:
                await st.read("user:7", keys, retry=RetryPolicy(deadline=0.5))
            elapsed = time.monotonic() - started
        finally:
            paused.resume()
    assert info.value.shard == paused.address and info.value.deadline == 0.5
    assert isinstance(info.value, stampede.ShardTimeout) and isinstance(info.value, TimeoutError)
    assert "deadline of 0.5 s" in str(info.value) and paused.address in str(info.value)
    assert elapsed < 15  # the socket timeout is 30 s


# -- closing with calls in flight ------------------------------------------------------


async def test_calls_in_flight_when_the_client_closes_leave_no_connection_open(
    primaries: LocalPrimaries,
) -> None:
    """`aclose()` while calls wait on a shard: each caller hears of it (a read whose
    connection the close ended is not sent again on a new one, a non-idempotent
    command's outcome is unknown) and no connection is opened after the close, where
    nothing would ever close it; `open()` makes the client usable again."""
    name = "closing-in-flight"
    slow = ConnectOptions(socket_timeout=30, connect_timeout=5, connection_retries=3)
    st = stampede.connect([f"{u}?client_name={name}" for u in primaries.urls], connection=slow)
    await st.open()
    key = b"closing:{1}"
    home = st.topology.shard_of(key)
    paused = next(n for n in primaries.nodes if n.address == home)
    paused.pause()
    try:
        read = asyncio.ensure_future(st.topology.execute(key, "GET", key))
        incr = asyncio.ensure_future(st.topology.execute(key, "INCR", key))
        for _ in range(3):  # both are sent (on the connection `open` made), and wait
            await asyncio.sleep(0)
        assert not read.done() and not incr.done()
        await st.aclose()
    finally:
        paused.resume()
    got = await asyncio.gather(read, incr, return_exceptions=True)
    assert isinstance(got[0], ClientClosedError), got[0]
    assert got[0].shard == home and "open it again" in str(got[0])
    assert isinstance(got[1], stampede.OutcomeUnknownError), got[1]

    async def none_left() -> bool:
        return await asyncio.to_thread(_named, paused, name) == 0

    await eventually(none_left, within=10)
    with pytest.raises(ClientClosedError, match="open it again"):
        await st.topology.execute(key, "GET", key)  # still closed: nothing opened
    async with st:  # open again
        await st.write("closing:{1}", {"closing:{1}:a": b"v"})
        read_back = await st.read("closing:{1}", ["closing:{1}:a"])
        assert read_back.values == {"closing:{1}:a": b"v"}
    await eventually(none_left, within=10)


async def test_a_closed_cluster_client_opens_no_connection_until_opened_again(
    stampede_cluster: LocalCluster,
) -> None:
    """A call after `aclose()` (one still in flight then) raises at once, naming the
    fix, and opens no connection to any node; `open()` makes the client usable again."""
    name = "closed-cluster"
    st = stampede.connect(f"{stampede_cluster.url}?client_name={name}", cluster=True)
    async with st:
        await st.write("closed:{1}", {"closed:{1}:a": b"v"})
    with pytest.raises(ClientClosedError, match="open it again"):
        await st.topology.execute(b"closed:{1}:a", "GET", "closed:{1}:a")

    async def none_left() -> bool:
        counts = [await asyncio.to_thread(_named, n, name) for n in stampede_cluster.nodes]
        return sum(counts) == 0

    await eventually(none_left, within=10)
    async with st:
        read_back = await st.read("closed:{1}", ["closed:{1}:a"])
        assert read_back.values == {"closed:{1}:a": b"v"}
    await eventually(none_left, within=10)


class _ClosingBeforeCommit(DelegatingTopology):
    """Closes the client ahead of the first COMMIT call; counts the COMMIT calls."""

    def __init__(self, st: stampede.Stampede) -> None:
        super().__init__(st.topology)
        self.st = st
        self.commits = 0

    async def script(self, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        if script.sha == COMMIT.sha:
            self.commits += 1
            if self.commits == 1:
                await self.st.aclose()
        return await self.inner.script(script, keys, args)


async def test_a_transaction_whose_client_closes_before_its_commit_answers_at_once(
    primaries: LocalPrimaries,
) -> None:
    """Prepared everywhere, then the client closes: the commit is not resent for the
    transaction timeout (nothing more can be sent), the writer hears at once that no
    commit was acknowledged, and the transaction stays invisible."""
    st = open_stampede(primaries, "shards", transaction_timeout=30)
    await st.open()
    keys = spread_keys(st, "txclose", 2)
    closing = _ClosingBeforeCommit(st)
    tx = st.transaction()
    tx._topology = closing  # noqa: SLF001 - the test swaps in the closing step
    for key in keys:
        tx.set(key, b"v")
    with pytest.raises(stampede.OutcomeUnknownError) as info:
        await tx.commit()
    assert isinstance(info.value.cause, ClientClosedError)
    assert closing.commits == 2  # one call per shard, none sent again
    async with st:
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, None)


async def test_closing_a_cluster_client_ends_its_background_slot_map_reload(
    stampede_cluster: LocalCluster,
) -> None:
    """A slot-map reload running in the background when the client closes (a node had
    failed) is over once `aclose()` returns: no task of the client outlives it."""
    st = stampede.connect(stampede_cluster.url, cluster=True, connection=FAST)
    await st.open()
    router = st.topology._router  # type: ignore[attr-defined]  # noqa: SLF001 - no public trigger
    router.stale("")  # what a failed node does: the map reloads in the background
    await st.aclose()
    left = [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "").startswith("Router.")
    ]
    assert left == []


async def test_an_aclose_cancelled_while_it_waits_for_batches_still_closes_every_connection(
    primaries: LocalPrimaries,
) -> None:
    """`aclose()` waits for the batches in flight; cancelled meanwhile (a shutdown's own
    deadline), it still closes every connection, and the write it waited for is
    answered (an error, its part never acknowledged), not left to finish later on a
    connection nothing would close."""
    name = "close-cancelled"
    slow = ConnectOptions(socket_timeout=30, connect_timeout=5, connection_retries=1)
    st = stampede.connect([f"{u}?client_name={name}" for u in primaries.urls], connection=slow)
    await st.open()
    home = st.topology.shard_of(b"cc:{1}:a")
    paused = next(n for n in primaries.nodes if n.address == home)
    paused.pause()
    try:
        write = asyncio.ensure_future(st.write("cc:{1}", {"cc:{1}:a": b"v"}))
        await asyncio.sleep(0)  # the write's batch is sent, its reply awaited
        closing = asyncio.ensure_future(st.aclose())
        await asyncio.sleep(0)  # aclose waits for that batch
        assert not write.done() and not closing.done()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
    finally:
        paused.resume()
    with pytest.raises(stampede.WriteError):  # not a receipt on a connection left open
        await write

    async def none_left() -> bool:
        return await asyncio.to_thread(_named, paused, name) == 0

    await eventually(none_left, within=10)
