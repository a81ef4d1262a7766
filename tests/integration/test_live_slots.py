"""Live hot-slot analysis (`stampede.keys.live_slots`, `stampede slots --url`) on real servers.

The reference is independent of the code under test: the cluster's own
`CLUSTER SLOTS` map and `CLUSTER COUNTKEYSINSLOT` for every slot, asked of each
master directly with the sync client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest
from click.testing import CliRunner
from redis.cluster import RedisCluster

from stampede.cli import main
from stampede.errors import ConfigurationError
from stampede.keys import SLOTS, HashPolicy, ScanProgress, SlotMap, analyze, keyslot, live_slots
from stampede.testing import LocalCluster, LocalPrimaries, RedisProxy, ServerBinary
from stampede.topology._cluster import Cluster
from stampede.topology._shards import Shards

HOT_TAG = b"global"
HOT_KEYS = 100
SPREAD_KEYS = 500


def has_slot_stats(server: ServerBinary) -> bool:
    """CLUSTER SLOT-STATS exists from Valkey 8.0 and Redis 8.2."""
    floor = (8, 0) if server.kind == "valkey" else (8, 2)
    return server.version_tuple[:2] >= floor


@pytest.fixture
def planted(stampede_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """600 keys on the shared cluster: 500 spread by their own tags, 100 in one hot tag."""
    with RedisCluster.from_url(stampede_cluster.url) as client:
        pipe = client.pipeline()
        for i in range(SPREAD_KEYS):
            pipe.set(f"prod:cart:{{{i}}}:items", b"x")
        for i in range(HOT_KEYS):
            pipe.set(b"feed:{%s}:%d" % (HOT_TAG, i), b"x")
        pipe.execute()
    yield stampede_cluster


@pytest.fixture
async def cluster_topology(planted: LocalCluster) -> AsyncIterator[Cluster]:
    topology = Cluster(planted.url)
    await topology.open()
    try:
        yield topology
    finally:
        await topology.aclose()


def independent_counts(cluster: LocalCluster) -> tuple[dict[str, int], list[int]]:
    """Keys per master and per slot from CLUSTER SLOTS and CLUSTER COUNTKEYSINSLOT."""
    per_master: dict[str, int] = {}
    per_slot = [0] * SLOTS
    for node in cluster.masters:
        client = node.client()
        try:
            ranges = [
                (int(first), int(last))
                for first, last, master, *_ in client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
                if int(master[1]) == node.port
            ]
            slots = [slot for first, last in ranges for slot in range(first, last + 1)]
            pipe = client.pipeline(transaction=False)
            for slot in slots:
                pipe.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)  # type: ignore[no-untyped-call]
            counts = pipe.execute()
        finally:
            client.close()
        for slot, count in zip(slots, counts, strict=True):
            per_slot[slot] = int(count)
        per_master[node.address] = sum(int(c) for c in counts)
    return per_master, per_slot


async def test_scan_matches_countkeysinslot_over_the_real_slot_map(
    cluster_topology: Cluster, planted: LocalCluster
) -> None:
    """SCAN on every master, mapped by the cluster's slot map, gives the server's own counts."""
    steps: list[ScanProgress] = []
    report = await live_slots(cluster_topology, method="scan", top=3, progress=steps.append)
    per_master, per_slot = independent_counts(planted)
    assert report.method == "scan"
    assert report.total == report.scanned == SPREAD_KEYS + HOT_KEYS
    assert report.shard_counts == per_master
    assert list(report.slot_keys) == per_slot
    assert report.misplaced == {}
    # The harness splits 16384 slots as 0-5460, 5461-10921, 10922-16383, not as
    # redis-cli's even(3): the report follows the cluster, not an even split.
    assert report.distribution.slot_map != SlotMap.even(3)
    hot = report.hottest[0]
    assert (hot.slot, hot.keys, hot.tags) == (keyslot(HOT_TAG), HOT_KEYS, ((HOT_TAG, HOT_KEYS),))
    assert hot.shard == planted.master_for_slot(hot.slot).address
    assert report.hottest_shard == hot.shard
    assert report.skew == max(per_master.values()) / ((SPREAD_KEYS + HOT_KEYS) / 3)
    done = {step.shard for step in steps if step.done}
    assert done == set(per_master) and steps[-1].shards_done == 3


async def test_auto_uses_slot_stats_where_the_server_has_it(
    cluster_topology: Cluster, planted: LocalCluster, stampede_server_binary: ServerBinary
) -> None:
    """auto: CLUSTER SLOT-STATS on Valkey >= 8 / Redis >= 8.2, SCAN otherwise; same counts."""
    report = await live_slots(cluster_topology, top=2)
    expected = "slot-stats" if has_slot_stats(stampede_server_binary) else "scan"
    assert report.method == expected
    per_master, per_slot = independent_counts(planted)
    assert report.shard_counts == per_master
    assert list(report.slot_keys) == per_slot
    assert report.hottest[0].tags == ((HOT_TAG, HOT_KEYS),)
    if expected == "scan":
        with pytest.raises(ConfigurationError, match="SLOT-STATS"):
            await live_slots(cluster_topology, method="slot-stats")


async def test_slot_stats_cpu_and_network_when_enabled(
    cluster_topology: Cluster, planted: LocalCluster, stampede_server_binary: ServerBinary
) -> None:
    """With cluster-slot-stats-enabled, the hot slot's network bytes are reported."""
    if not has_slot_stats(stampede_server_binary):
        pytest.skip(f"{stampede_server_binary.describe()} has no CLUSTER SLOT-STATS")
    clients = [node.client() for node in planted.masters]
    try:
        for client in clients:
            client.config_set("cluster-slot-stats-enabled", "yes")
        with RedisCluster.from_url(planted.url) as reader:
            for i in range(HOT_KEYS):
                reader.get(b"feed:{%s}:%d" % (HOT_TAG, i))
        report = await live_slots(cluster_topology, top=1, method="slot-stats")
    finally:
        for client in clients:
            client.config_set("cluster-slot-stats-enabled", "no")
            client.close()
    assert report.stats_enabled
    hot = report.hottest[0]
    assert hot.slot == keyslot(HOT_TAG)
    assert hot.stats["network-bytes-in"] > 0 and hot.stats["network-bytes-out"] > 0
    assert set(hot.stats) == {"cpu-usec", "network-bytes-in", "network-bytes-out"}


async def test_a_cluster_behind_an_address_remap_is_named_as_the_topology_names_it(
    planted: LocalCluster,
) -> None:
    """Through proxies (`address_remap`), the nodes announce addresses the topology does
    not connect to: the report names each primary as the topology does (matched by
    node id), so the default method works (it asked an unknown primary and raised
    ConfigurationError) and the counts land on the right names."""
    proxies = {node.address: RedisProxy(node.address) for node in planted.masters}
    for proxy in proxies.values():
        await proxy.start()
    topology = Cluster(
        proxies[planted.masters[0].address].url,
        address_remap=lambda addr: (
            proxies[f"{addr[0]}:{addr[1]}"].host,
            proxies[f"{addr[0]}:{addr[1]}"].port,
        ),
    )
    try:
        await topology.open()
        report = await live_slots(topology, top=1)
        scanned = await live_slots(topology, method="scan", top=1)
    finally:
        await topology.aclose()
        for proxy in proxies.values():
            await proxy.aclose()
    per_master, per_slot = independent_counts(planted)
    via = {proxies[address].address: count for address, count in per_master.items()}
    for found in (report, scanned):
        assert set(found.shard_names) == set(topology.shard_names) == set(via)
        assert found.shard_counts == via
        assert list(found.slot_keys) == per_slot
        assert found.misplaced == {}
        assert (
            found.hottest[0].shard
            == proxies[planted.master_for_slot(keyslot(HOT_TAG)).address].address
        )


async def test_tags_under_a_hashing_policy_are_the_policy_s(
    stampede_primaries: LocalPrimaries,
) -> None:
    """On shards that hash by a `HashPolicy`, the tags of the hot slots and `tagged` are
    what the policy hashes, as `analyze` counts the same keys (they were hash tags
    only: no tag, and 0 keys tagged)."""
    policy = HashPolicy(r"order:(?<tag>\d+):")
    topology = Shards(stampede_primaries.urls, policy=policy)
    keys = [b"order:7:line:%d" % i for i in range(30)] + [b"order:%d:total" % i for i in range(20)]
    try:
        await topology.open()
        for key in keys:
            await topology.execute(key, "SET", key, b"1")
        report = await live_slots(topology, top=1)
    finally:
        await topology.aclose()
    offline = analyze(keys, shards=topology.slot_map, policy=policy, top=1)
    assert report.distribution.tagged == offline.tagged == len(keys)
    hot = report.hottest[0]
    assert (hot.slot, hot.keys) == (policy.keyslot(b"order:7:"), 31)
    assert hot.tags == ((b"7", 31),)
    assert report.distribution.shard_counts == offline.shard_counts


async def test_client_side_shards_use_their_slot_map(stampede_primaries: LocalPrimaries) -> None:
    """On independent primaries the topology's SlotMap decides; a stray key is reported."""
    slot_map = SlotMap.from_ranges({0: [(0, 999)], 1: [(1000, 1999)], 2: [(2000, SLOTS - 1)]})
    topology = Shards(stampede_primaries.urls, slot_map=slot_map)
    keys = [f"user:{{{i}}}:a".encode() for i in range(200)]
    try:
        for key in keys:
            shard = slot_map.shard_of(keyslot(key))
            stampede_primaries.nodes[shard].client().set(key, b"1")
        stray_owner = slot_map.shard_of(keyslot(b"stray:{x}"))
        wrong = stampede_primaries.nodes[(stray_owner + 1) % 3]
        wrong.client().set(b"stray:{x}", b"1")
        report = await live_slots(topology, method="auto", match="*:*", count=7)
    finally:
        await topology.aclose()
    assert report.method == "scan" and report.kind == "shards"
    expected = [0, 0, 0]
    for key in [*keys, b"stray:{x}"]:
        expected[slot_map.shard_of(keyslot(key))] += 1
    assert report.distribution.shard_counts == tuple(expected)
    assert report.misplaced == {wrong.address: 1}


def test_cli_reports_the_cluster_per_shard_counts(planted: LocalCluster) -> None:
    """`stampede slots --url NODE --cluster --json`: the independent per-master counts."""
    result = CliRunner().invoke(
        main, ["slots", "--url", planted.url, "--cluster", "--method", "scan", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    per_master, per_slot = independent_counts(planted)
    assert {s["name"]: s["keys"] for s in data["shards"]} == per_master
    assert data["total"] == SPREAD_KEYS + HOT_KEYS
    assert data["hottest_slots"][0]["tags"] == [{"tag": "global", "keys": HOT_KEYS}]
    assert data["slot_keys"] == {str(s): n for s, n in enumerate(per_slot) if n}


def test_cli_table_names_the_hot_tag(planted: LocalCluster) -> None:
    """The table output names the primaries, the hot slot and its tag."""
    result = CliRunner().invoke(main, ["slots", "--url", planted.url, "--cluster", "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "600 keys on 3 primaries of a cluster" in result.stdout
    assert f"{keyslot(HOT_TAG)}" in result.stdout and "{global} 100" in result.stdout
    for node in planted.masters:
        assert node.address in result.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["slots", "--url", "redis://127.0.0.1:1", "k"], "not both"),
        (["slots", "--cluster", "k"], "need --url"),
        (["slots", "--url", "redis://127.0.0.1:1", "--shards", "4"], "servers are the shards"),
        (["slots", "--cluster", "--pattern", "(?P<tag>x)", "--url", "redis://a:1"], "--pattern"),
    ],
)
def test_cli_live_usage_errors(args: list[str], fragment: str) -> None:
    """Mixing a key sample with --url, or --cluster without it, is a usage error."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_cli_unreachable_url_is_a_clean_error() -> None:
    """A server that does not answer: exit 1 with a message naming it, no traceback."""
    result = CliRunner().invoke(main, ["slots", "--url", "redis://127.0.0.1:1"])
    assert result.exit_code == 1
    assert "127.0.0.1:1" in result.output and "Traceback" not in result.output


def test_cli_refuses_a_cluster_node_without_cluster(planted: LocalCluster) -> None:
    """`slots --url NODE` without --cluster used to answer as if one primary held every
    slot: now refused (a runtime failure, exit 1), naming the flag."""
    result = CliRunner().invoke(main, ["slots", "--url", planted.url])
    assert result.exit_code == 1, result.output
    assert "pass --cluster" in result.output and "Traceback" not in result.output


def test_cli_does_not_count_the_shard_identity_record(stampede_primaries: LocalPrimaries) -> None:
    """Each primary's `stampede:shard` record lives there whatever its slot: not a user
    key, and never "misplaced"."""
    for node in stampede_primaries.nodes:
        node.client().set(b"stampede:shard", b"{}")
    node = stampede_primaries.nodes[0]
    node.client().set(b"user:{1}:a", b"1")
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    result = CliRunner().invoke(main, ["slots", *urls, "--method", "scan", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["total"] == 1
    assert not any(s.get("misplaced") for s in data["shards"])
    text = CliRunner().invoke(main, ["slots", *urls, "--method", "scan"], terminal_width=200)
    assert text.exit_code == 0, text.output
    first = text.stdout.splitlines()[0]  # it said "on 3 primaries of a shards"
    assert first.startswith("1 key on 3 primaries sharded by the client (counted with"), first


def test_cli_match_takes_the_bytes_the_shell_passed(stampede_primaries: LocalPrimaries) -> None:
    """`slots --url ... --match` with a byte that is not UTF-8 (a Latin-1 é, which
    Python hands over surrogate-escaped) matches the keys holding that byte; it was
    a UnicodeEncodeError traceback. The library names the pattern and the fix."""
    node = stampede_primaries.nodes[0]
    node.client().set(b"caf\xe9:1", b"1")
    node.client().set("café:2".encode(), b"1")
    urls = [a for url in stampede_primaries.urls for a in ("--url", url)]
    result = CliRunner().invoke(main, ["slots", *urls, "--match", "caf\udce9*", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] == 1


async def test_a_match_that_is_not_utf8_text(stampede_primaries: LocalPrimaries) -> None:
    """live_slots(match=) with a lone surrogate: `ConfigurationError` saying to pass bytes."""
    topology = Shards(stampede_primaries.urls)
    try:
        with pytest.raises(ConfigurationError, match=r"cannot be encoded as UTF-8.*as bytes"):
            await live_slots(topology, match="caf\udce9*")
    finally:
        await topology.aclose()
