"""Sentinel-managed primaries: `connect(sentinels=..., services=...)` finds each shard's
primary, and a client that is open when a primary dies writes again once Sentinel
has promoted its replica. Real primaries, replicas and Sentinel processes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.exceptions import RedisError

import stampede
from stampede import ConfigurationError, RetryPolicy, SetupError, ShardUnavailable, Stampede
from stampede.options import ConnectOptions
from stampede.testing import LocalSentinels, RedisNode
from stampede.testing._admin import command
from stampede.topology import SentinelShards

from ..support import caught_up, eventually, run_cli

pytestmark = pytest.mark.timeout(180)  # real elections, on a machine that may be busy

FOLLOW = ConnectOptions(
    socket_timeout=1.0, connect_timeout=0.5, connection_retries=1, failover_timeout=30.0
)


@pytest.fixture
def watched() -> Iterator[LocalSentinels]:
    """Two services (a primary and a replica each) and three Sentinels (quorum 2)."""
    with LocalSentinels(2, replicas=1, sentinels=3) as servers:
        yield servers


@pytest.fixture
async def st(watched: LocalSentinels) -> AsyncIterator[Stampede]:
    async with stampede.connect(
        sentinels=watched.sentinel_urls, services=watched.names, connection=FOLLOW
    ) as client:
        yield client


def _group_on(st: Stampede, service: str) -> str:
    """A group name whose keys live on `service`'s shard."""
    for i in range(1000):
        group = f"sv:{{{i}}}"
        if st.topology.shard_of(f"{group}:a".encode()) == service:
            return group
    raise AssertionError(f"no group routes to {service}")


async def test_the_shards_are_the_services_in_order(watched: LocalSentinels, st: Stampede) -> None:
    """Each shard is named after its service and reaches that service's primary."""
    assert st.topology.shard_names == watched.names
    for name in watched.names:
        group = _group_on(st, name)
        await st.write(group, {f"{group}:a": b"x", f"{group}:b": b"y"})
        got = await st.read(group, [f"{group}:a", f"{group}:b"])
        assert got.consistent
        primary = watched.node_at(watched.primary_of(name))
        assert primary.client().exists(f"{group}:a") == 1


async def test_a_client_open_before_a_primary_dies_writes_after_the_promotion(
    watched: LocalSentinels, st: Stampede
) -> None:
    """The primary of shard-a is killed: the open client's next write waits until
    Sentinel promotes the replica and lands there; a read follows it."""
    name = watched.names[0]
    group = _group_on(st, name)
    keys = [f"{group}:a", f"{group}:b"]
    await st.write(group, dict.fromkeys(keys, b"before"))
    old = watched.node_at(watched.primary_of(name))
    caught_up(old)
    old.kill()
    await st.write(group, dict.fromkeys(keys, b"after"))
    got = await st.read(group, keys, retry=RetryPolicy(deadline=30.0))
    assert got.consistent and got.values == dict.fromkeys(keys, b"after")

    async def told() -> bool:  # the client may know before the Sentinel asked here does
        return await asyncio.to_thread(watched.primary_of, name) != (old.host, old.port)

    await eventually(told, within=90.0)
    assert isinstance(st.topology, SentinelShards) and st.topology.switches >= 3


async def test_a_write_that_timed_out_at_a_paused_primary_waits_for_the_promotion(
    watched: LocalSentinels, st: Stampede
) -> None:
    """The primary of shard-a is SIGSTOPped: a write (safe to resend) times out there
    and goes again, within `failover_timeout`, to the replica Sentinel promotes. It
    raised `WriteTimeout` at the first timeout, a second before the promotion, where
    the docs promise that a call safe to resend goes again to the new primary."""
    name = watched.names[0]
    group = _group_on(st, name)
    key = f"{group}:a"
    await st.write(group, {key: b"before"})
    old = watched.node_at(watched.primary_of(name))
    caught_up(old)
    old.pause()
    try:
        receipt = await st.write(group, {key: b"after"})
        got = await st.read(group, [key], retry=RetryPolicy(deadline=30.0))
    finally:
        old.resume()
    assert receipt.keys == (key.encode(),)
    assert got.values == {key: b"after"}


def _named_by_a_sentinel(
    watched: LocalSentinels, name: str, old: tuple[str, int]
) -> RedisNode | None:
    """The node that some Sentinel names as `name`'s primary instead of `old`, once it
    answers as a primary (the first Sentinel to know: the others learn later)."""
    for sentinel in watched.sentinels:
        if sentinel.is_paused:
            continue
        try:
            host, port = command(sentinel, "SENTINEL", "get-master-addr-by-name", name)
            address = (host.decode() if isinstance(host, bytes) else str(host), int(port))
            if address != old and command(watched.node_at(address), "ROLE")[0] == b"master":
                return watched.node_at(address)
        except (RedisError, OSError):
            continue
    return None


def _role_and_keys(node: RedisNode, keys: list[str]) -> tuple[bytes, int]:
    """What `node` calls itself and how many of `keys` it holds, in one snapshot."""
    pipe = node.client().pipeline(transaction=True)
    pipe.role()
    pipe.exists(*keys)
    role, held = pipe.execute()
    return bytes(role[0]), int(held)


@pytest.mark.parametrize("silent", [False, True], ids=["sentinels-up", "first-sentinel-silent"])
async def test_a_killed_primary_restarted_at_its_old_address_gets_no_writes(
    watched: LocalSentinels, st: Stampede, silent: bool
) -> None:
    """The primary of shard-a is SIGKILLed; once a Sentinel names the promoted replica,
    the old process comes back at its old port as an empty primary (until Sentinel
    demotes it, seconds later). The writes of the client that was open all along, a
    transaction's too, must go to the promoted replica, never to that zombie, even
    when the Sentinel listed first (`silent`: SIGSTOPped from before the kill) tells
    the client nothing."""
    name = watched.names[0]
    group = _group_on(st, name)
    await st.write(group, {f"{group}:a": b"before"})
    old = watched.node_at(watched.primary_of(name))
    caught_up(old)
    if silent:
        watched.sentinels[0].pause()
    old.kill()
    promoted: list[RedisNode] = []

    async def named() -> bool:
        node = await asyncio.to_thread(_named_by_a_sentinel, watched, name, (old.host, old.port))
        promoted.extend([node] if node is not None else [])
        return node is not None

    await eventually(named, within=90.0)
    new = promoted[0]
    old.restart()  # empty, and a primary (as its config says) until Sentinel demotes it
    keys = [f"{group}:b", f"{group}:c"]
    await st.write(group, dict.fromkeys(keys, b"after"))
    async with st.transaction() as tx:
        tx.set(f"{group}:d", b"in a transaction")
    keys.append(f"{group}:d")
    assert new.client().exists(*keys) == len(keys), "the promoted primary lacks the writes"
    role, held = _role_and_keys(old, keys)
    assert role != b"master" or held == 0, "writes reached the restarted old primary"
    if silent:
        watched.sentinels[0].resume()


async def test_a_lost_connection_is_made_again_only_where_the_sentinels_confirm(
    watched: LocalSentinels, st: Stampede
) -> None:
    """Every Sentinel is silent (SIGSTOPped) when the client's connections to a primary
    are cut: the client does not reconnect to that address unconfirmed (it may be an
    old primary restarted empty while the Sentinels promoted its replica, as a loaded
    failover test once showed: reads there found nothing). The read waits; once the
    Sentinels answer again and confirm the primary, it completes with the value."""
    name = watched.names[0]
    group = _group_on(st, name)
    await st.write(group, {f"{group}:a": b"before"})
    primary = watched.node_at(watched.primary_of(name))
    for sentinel in watched.sentinels:
        sentinel.pause()
    try:
        command(primary, "CLIENT", "KILL", "TYPE", "normal")
        reading = asyncio.ensure_future(
            st.read(group, [f"{group}:a"], retry=RetryPolicy(deadline=60.0))
        )
        done, _ = await asyncio.wait([reading], timeout=2.0)
        assert not done, "the client reconnected where no Sentinel confirmed a primary"
    finally:
        for sentinel in watched.sentinels:
            sentinel.resume()
    got = await reading
    assert got.values == {f"{group}:a": b"before"}


async def test_a_scan_across_a_failover_is_refused_not_cut_short(
    watched: LocalSentinels, st: Stampede
) -> None:
    """A SCAN of a shard that Sentinel fails over mid-way: the next page, asked with
    the old primary's cursor, raises `ShardUnavailable` (the promoted replica orders
    its keys otherwise: going on there skipped keys, silently; `stampede scan` and the
    sweep missed them). A scan begun again finds every key."""
    name = watched.names[0]
    primary = watched.node_at(watched.primary_of(name))
    admin = primary.client()
    admin.mset({f"sc:{i}": b"x" for i in range(2000)})
    caught_up(primary)
    cursor, _ = await st.topology.execute_on(name, "SCAN", 0, "COUNT", 100)
    assert int(cursor) != 0
    assert isinstance(st.topology, SentinelShards)
    before = st.topology.switches
    command(watched.sentinels[0], "SENTINEL", "FAILOVER", name)

    topology = st.topology
    assert isinstance(topology, SentinelShards)

    async def moved() -> bool:
        return topology.switches > before

    await eventually(moved, within=60.0)
    with pytest.raises(ShardUnavailable, match="scan of this shard again"):
        await st.topology.execute_on(name, "SCAN", cursor, "COUNT", 100)
    found: set[bytes] = set()
    cursor = 0
    while True:
        cursor, keys = await st.topology.execute_on(name, "SCAN", cursor, "COUNT", 500)
        found.update(k for k in keys if k.startswith(b"sc:"))
        if int(cursor) == 0:
            break
    assert len(found) == 2000


def _held_down(watched: LocalSentinels, name: str) -> bool:
    """Whether some Sentinel holds `name`'s primary down (`s_down` or `o_down`)."""
    for sentinel in watched.sentinels:
        with contextlib.suppress(RedisError, OSError):
            fields = command(sentinel, "SENTINEL", "MASTER", name)  # parsed: a dict
            if "_down" in str(fields.get("flags", fields.get(b"flags", ""))):
                return True
    return False


async def test_open_during_a_failover_waits_for_the_promoted_replica(
    watched: LocalSentinels,
) -> None:
    """A client opened while its shard's primary is dead and no replica is promoted
    yet (the replica SIGSTOPped: no failover can end) waits, within
    `failover_timeout`, as calls do, instead of failing: `open()` took the dead
    address the Sentinels named and raised `SetupError` ("could not connect"). Once
    the replica can be promoted, `open()` completes there and writes land on it."""
    name = watched.names[0]
    old = watched.node_at(watched.primary_of(name))
    replica = watched.replicas[watched.primaries.index(old)]
    old.client().set("before", b"1")
    caught_up(old)
    replica.pause()
    old.kill()
    options = FOLLOW.model_copy(update={"failover_timeout": 90.0})
    client = stampede.connect(
        sentinels=watched.sentinel_urls, services=watched.names, connection=options
    )
    try:
        opening = asyncio.ensure_future(client.open())

        async def held_down() -> bool:
            return await asyncio.to_thread(_held_down, watched, name)

        await eventually(held_down, within=60.0)
        assert not opening.done(), opening.exception()  # no primary exists now
        replica.resume()
        await opening
        group = _group_on(client, name)
        await client.write(group, {f"{group}:a": b"after"})
        assert replica.client().get(f"{group}:a") is not None
        assert replica.client().get("before") == b"1"
    finally:
        replica.resume()
        await client.aclose()


def _protect_data_nodes(watched: LocalSentinels, password: str) -> None:
    """A password on every data node (replication and the Sentinels told first, so
    nothing fails over); the Sentinels themselves keep none."""
    data = [*watched.primaries, *watched.replicas]
    for node in data:
        command(node, "CONFIG", "SET", "masterauth", password)
    for sentinel in watched.sentinels:
        for name in watched.names:
            command(sentinel, "SENTINEL", "SET", name, "auth-pass", password)
    for node in data:
        command(node, "CONFIG", "SET", "requirepass", password)


async def test_data_nodes_may_have_credentials_apart_from_the_sentinels(
    watched: LocalSentinels,
) -> None:
    """Data nodes with a password, Sentinels without (a common set-up): connect()
    reached the data nodes only with the first Sentinel URL's credentials, so such a
    deployment could not be used at all. `data_url` (a URL without a host) gives the
    data nodes' own; a host in it, or data_url without Sentinels, is refused."""
    await asyncio.to_thread(_protect_data_nodes, watched, "data-pw")
    plain = stampede.connect(
        sentinels=watched.sentinel_urls, services=watched.names, connection=FOLLOW
    )
    with pytest.raises(SetupError) as refused:
        await plain.open()
    await plain.aclose()
    assert refused.value.problem == "auth", refused.value
    async with stampede.connect(
        sentinels=watched.sentinel_urls,
        services=watched.names,
        data_url="redis://:data-pw@",
        connection=FOLLOW,
    ) as st:
        for name in watched.names:
            group = _group_on(st, name)
            await st.write(group, {f"{group}:a": b"x", f"{group}:b": b"y"})
            assert (await st.read(group, [f"{group}:a", f"{group}:b"])).consistent
    with pytest.raises(ConfigurationError, match="names a host"):
        stampede.connect(
            sentinels=watched.sentinel_urls, services=watched.names, data_url="redis://h:1"
        )
    with pytest.raises(ConfigurationError, match="data_url"):
        stampede.connect(["redis://h:1"], data_url="redis://:pw@")


async def test_an_unknown_service_is_refused_at_open(watched: LocalSentinels) -> None:
    """A service no Sentinel monitors is a SetupError naming it."""
    client = stampede.connect(sentinels=watched.sentinel_urls, services=["nope"], connection=FOLLOW)
    with pytest.raises(SetupError, match="'nope'"):
        await client.open()
    await client.aclose()


async def test_sentinels_that_cannot_be_asked_are_named_with_the_reason(
    watched: LocalSentinels,
) -> None:
    """Sentinels that refuse the URL's password, or where nothing listens: `open()`
    says so (the `problem` and its fix, as for a data node), not that the service
    names may be wrong."""
    wrong = [u.replace("redis://", "redis://:wrong@") for u in watched.sentinel_urls]
    client = stampede.connect(sentinels=wrong, services=watched.names, connection=FOLLOW)
    with pytest.raises(SetupError) as refused:
        await client.open()
    await client.aclose()
    assert refused.value.problem == "auth", refused.value
    assert "password" in str(refused.value) and "service names" not in str(refused.value)
    dead = stampede.connect(
        sentinels=["redis://127.0.0.1:1"], services=watched.names, connection=FOLLOW
    )
    with pytest.raises(SetupError) as unreachable:
        await dead.open()
    await dead.aclose()
    assert unreachable.value.problem == "unreachable" and "is the server up" in str(
        unreachable.value
    )


def test_sentinel_arguments_are_checked() -> None:
    """URLs and sentinels together, or sentinels without services, say what to give."""
    with pytest.raises(ConfigurationError, match="not both"):
        stampede.connect(["redis://a"], sentinels=["redis://s"], services=["x"])
    with pytest.raises(ConfigurationError, match="both sentinels"):
        stampede.connect(sentinels=["redis://s:26379"])
    with pytest.raises(ConfigurationError, match="lists"):
        stampede.connect(sentinels="redis://s:26379", services=["x"])


def test_services_must_be_names_and_any_iterable_is_read_once() -> None:
    """A service given as bytes (or not a str, or empty) is refused at once: the client
    matched `+switch-master`, which names the service as text, against it and never
    followed the failover it announced. Sentinels and services given as generators
    are read once (they raised a bare TypeError)."""
    for wrong in ([b"shard-a"], [1], [""]):
        with pytest.raises(ConfigurationError, match="non-empty str"):
            stampede.connect(sentinels=["redis://s:26379"], services=wrong)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="lists"):
        stampede.connect(sentinels=["redis://s:26379"], services=b"shard-a")  # type: ignore[arg-type]
    client = stampede.connect(
        sentinels=(u for u in ["redis://s1:26379", "redis://s2:26379"]),  # type: ignore[arg-type]
        services=(n for n in ["shard-a", "shard-b"]),  # type: ignore[arg-type]
    )
    assert client.topology.shard_names == ["shard-a", "shard-b"]


async def test_the_cli_takes_sentinels_and_services(watched: LocalSentinels) -> None:
    """`--sentinel` and `--service` (repeatable) stand in for `--url` on the commands
    that connect; giving both, or one without the other, is a usage error."""
    where = [f"--sentinel={u}" for u in watched.sentinel_urls]
    where += [f"--service={n}" for n in watched.names]
    scan = ["scan", "--group-pattern", "(?P<group>sv:\\{\\d+\\}):.*"]
    done = await asyncio.to_thread(run_cli, *scan, *where, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    mixed = await asyncio.to_thread(run_cli, *scan, "--url", "redis://a:1", *where)
    assert mixed.returncode == 2 and b"not both" in mixed.stderr
    alone = await asyncio.to_thread(run_cli, *scan, where[0])
    assert alone.returncode == 2 and b"--service" in alone.stderr


async def test_the_cli_takes_the_data_nodes_credentials(watched: LocalSentinels) -> None:
    """Data nodes with a password behind Sentinels without one could be used from
    Python (`connect(data_url=...)`) but not from the command line: `--data-url` (or
    `$STAMPEDE_DATA_URL`) gives their credentials now, on every command that takes
    `--sentinel`; one that names a host, or comes without `--sentinel`, is a usage
    error that names the flag and never shows the password."""
    await asyncio.to_thread(_protect_data_nodes, watched, "data-pw")
    where = [f"--sentinel={u}" for u in watched.sentinel_urls]
    where += [f"--service={n}" for n in watched.names]
    stats = ["queue", "stats", "--json", *where]
    refused = await asyncio.to_thread(run_cli, *stats, timeout=60)
    assert refused.returncode == 1, refused.stderr.decode()  # the Sentinels' (no) password
    flag = await asyncio.to_thread(run_cli, *stats, "--data-url", "redis://:data-pw@")
    assert flag.returncode == 0, flag.stderr.decode()
    variable = {"STAMPEDE_DATA_URL": "redis://:data-pw@"}
    scan = ["scan", "--group-pattern", r"(?P<group>sv:\{\d+\}):.*", *where]
    scanned = await asyncio.to_thread(run_cli, *scan, env=variable, timeout=60)
    assert scanned.returncode == 0, scanned.stderr.decode()
    live = ["slots", "--json", *where, "--data-url", "redis://:data-pw@"]
    walked = await asyncio.to_thread(run_cli, *live, timeout=60)
    assert walked.returncode == 0, walked.stderr.decode()
    host = await asyncio.to_thread(run_cli, *stats, "--data-url", "redis://u:data-pw@h:1")
    err = host.stderr.decode()
    assert host.returncode == 2 and "'--data-url'" in err and "names a host" in err, err
    assert "data-pw" not in err, err
    alone = await asyncio.to_thread(
        run_cli, "queue", "stats", "--url", "redis://a:1", "--data-url", "redis://:pw@"
    )
    assert alone.returncode == 2 and b"--data-url" in alone.stderr, alone.stderr
