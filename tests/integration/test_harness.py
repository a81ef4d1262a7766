"""stampede.testing against real redis-server processes.

Tests that kill, pause or migrate use their own servers; only the plugin tests
touch the shared session fixtures.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, MovedError

import stampede.testing
from stampede.testing import (
    DockerCluster,
    DockerNode,
    DockerPrimaries,
    HarnessError,
    LocalCluster,
    LocalPrimaries,
    RedisNode,
    ServerStartError,
    _ports,
)
from stampede.testing._admin import _handshake_problems, command, meet_missing, wait_for
from stampede.testing.node import stop_nodes
from stampede.testing.plugin import make_cluster, make_primaries


@pytest.fixture
def node() -> Iterator[RedisNode]:
    """A private, started node."""
    with RedisNode() as started:
        yield started


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A private cluster (two masters, one replica each) for tests that reshape it."""
    with LocalCluster(masters=2, replicas=1) as started:
        yield started


def _key_served_by(cluster: LocalCluster, node: RedisNode) -> bytes:
    for i in range(1000):
        key = b"key-%d" % i
        if cluster.master_for_slot(key_slot(key)) is node:
            return key
    raise AssertionError(f"no key found for {node!r}")


def _other_master(cluster: LocalCluster, slot: int) -> RedisNode:
    owner = cluster.master_for_slot(slot)
    return next(m for m in cluster.masters if m is not owner)


# -- one node ---------------------------------------------------------------------------


def test_public_names_are_exported() -> None:
    """The package root exports exactly the documented public names, each one there."""
    for name in stampede.testing.__all__:
        assert getattr(stampede.testing, name) is not None
    assert sorted(stampede.testing.__all__) == [
        "ClusterNotReadyError",
        "DockerCluster",
        "DockerNode",
        "DockerPrimaries",
        "HarnessError",
        "LocalCluster",
        "LocalPrimaries",
        "LocalSentinels",
        "NodeOptions",
        "ProxyRule",
        "RedisNode",
        "RedisProxy",
        "SERVER_ENV",
        "SentinelNode",
        "ServerBinary",
        "ServerNotFoundError",
        "ServerStartError",
        "SlotMigration",
        "default_server",
        "drop_kept",
        "find_server",
    ]


def test_node_answers_on_its_url(node: RedisNode) -> None:
    """A started node answers on 127.0.0.1 at the port its url and address name."""
    assert node.url == f"redis://127.0.0.1:{node.port}"
    assert node.address == f"127.0.0.1:{node.port}"
    with redis.Redis.from_url(node.url) as client:
        assert client.ping()
        assert client.info("server")["process_id"] == node.pid


def test_killed_node_refuses_connections(node: RedisNode) -> None:
    """After kill() the process is gone and connecting is refused."""
    node.kill()
    assert not node.is_running
    assert node.pid is None
    client = node.client(socket_connect_timeout=1)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    client.close()


def test_paused_node_times_out_and_recovers_on_resume(node: RedisNode) -> None:
    """A paused node accepts no answers (the client times out) and serves again on resume."""
    client = node.client(socket_timeout=0.2)
    client.set(b"k", b"v")
    node.pause()
    assert (node.is_paused, node.is_running) == (True, True)
    with pytest.raises(redis.TimeoutError):
        client.get(b"k")
    node.resume()
    assert (node.is_paused, node.is_running) == (False, True)
    client.close()
    client = node.client(socket_timeout=2)
    assert client.get(b"k") == b"v"
    client.close()


def test_restarted_node_keeps_its_port_and_loses_its_data(node: RedisNode) -> None:
    """restart() brings the server back on the same port with no data."""
    port, pid = node.port, node.pid
    client = node.client()
    client.set(b"k", b"v")
    node.restart()
    assert node.port == port
    assert node.pid != pid
    assert client.dbsize() == 0
    client.close()


def test_stop_ends_the_process_and_removes_the_directory() -> None:
    """After stop() the server process no longer exists and its temp directory is gone."""
    node = RedisNode()
    node.start()
    pid, directory = node.pid, node.directory
    assert pid is not None and directory.is_dir()
    node.stop()
    assert not node.is_running
    assert not directory.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_primaries_stop_cleans_every_node() -> None:
    """LocalPrimaries.stop() ends every process (paused or killed ones too) and every directory."""
    primaries = LocalPrimaries(3)
    primaries.start()
    pids = [n.pid for n in primaries.nodes]
    directories = [n.directory for n in primaries.nodes]
    primaries.nodes[0].pause()
    primaries.nodes[1].kill()
    primaries.stop()
    for pid, directory in zip(pids, directories, strict=True):
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not directory.exists()


def test_node_that_cannot_start_raises_with_its_log() -> None:
    """A server that refuses its configuration raises ServerStartError quoting its log."""
    with pytest.raises(ServerStartError) as caught:
        with RedisNode(extra_args=["--no-such-directive", "1"]):
            pass  # pragma: no cover - never reached
    assert "Bad directive" in caught.value.log_tail
    assert "Bad directive" in str(caught.value)
    assert caught.value.log_path is not None
    assert not caught.value.log_path.parent.exists()  # cleaned up all the same


def test_missing_executable_says_how_to_install() -> None:
    """A redis-server that is not on PATH gives an error naming the fix."""
    with pytest.raises(ServerStartError, match="STAMPEDE_TEST_REDIS=docker"):
        RedisNode(redis_server="no-such-redis-server").start()


def test_port_taken_meanwhile_moves_to_another_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """If another server grabs the chosen port first, start() retries on a fresh port."""
    with RedisNode() as squatter:
        offered = iter([squatter.port])
        real = _ports.reserve_free_port

        def first_the_taken_one(host: str, *, cluster: bool = False) -> int:
            return next(offered, None) or real(host, cluster=cluster)

        monkeypatch.setattr("stampede.testing.node.reserve_free_port", first_the_taken_one)
        with RedisNode() as node:
            assert node.port != squatter.port
            with node.client() as client:
                assert client.info("server")["process_id"] == node.pid
            assert "Address already in use" in node.log_path.read_text()


def test_fixed_port_in_use_is_reported() -> None:
    """A node asked for a port that is taken fails with a message saying so."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ServerStartError, match=f"port {port} .*taken"):
            with RedisNode(port=port):
                pass  # pragma: no cover - never reached


# -- primaries and cluster --------------------------------------------------------------


def test_primaries_are_independent(stampede_primaries: LocalPrimaries) -> None:
    """A key written to one primary exists on no other."""
    assert len(set(stampede_primaries.urls)) == 3
    first, *others = stampede_primaries.nodes
    with first.client() as client:
        client.set(b"only-here", b"1")
    for other in others:
        with other.client() as client:
            assert client.exists(b"only-here") == 0


def test_cluster_reaches_ok_on_every_node(stampede_cluster: LocalCluster) -> None:
    """Every node of the shared cluster reports cluster_state:ok and all 16384 slots."""
    assert stampede_cluster.url == stampede_cluster.masters[0].url
    for member in stampede_cluster.nodes:
        with member.client() as client:
            info = client.execute_command("CLUSTER", "INFO")
        assert b"cluster_state:ok" in info
        assert b"cluster_slots_assigned:16384" in info


def test_fully_migrated_slot_answers_moved(cluster: LocalCluster) -> None:
    """After migrate_slot the old owner answers MOVED to the new one, which holds the keys."""
    key = b"{harness-moved}k"
    slot = key_slot(key)
    source, target = cluster.master_for_slot(slot), _other_master(cluster, slot)
    with source.client() as client:
        client.set(key, b"v")
    cluster.migrate_slot(slot, target)
    assert cluster.master_for_slot(slot) is target
    with source.client() as client, pytest.raises(MovedError) as caught:
        client.get(key)
    # redis-py strips the "MOVED " prefix of the error line into the exception type.
    assert str(caught.value) == f"{slot} {target.address}"
    with target.client() as client:
        assert client.get(key) == b"v"


def test_slot_mid_migration_answers_ask_for_a_moved_key(cluster: LocalCluster) -> None:
    """While a slot migrates, the old owner answers ASK for a moved key and serves the rest."""
    moved, stayed = b"{harness-ask}moved", b"{harness-ask}stayed"
    slot = key_slot(moved)
    source, target = cluster.master_for_slot(slot), _other_master(cluster, slot)
    with source.client() as client:
        client.mset({moved: b"1", stayed: b"2"})
    migration = cluster.begin_migration(slot, target)
    assert cluster.move_keys(slot, [moved]) == 1
    with source.client() as client:
        with pytest.raises(AskError) as caught:
            client.get(moved)
        assert not isinstance(caught.value, MovedError)
        assert caught.value.node_addr == (target.host, target.port)
        assert client.get(stayed) == b"2"
    with target.client() as client, pytest.raises(MovedError):
        client.get(moved)  # without ASKING the importing node still redirects
    cluster.finish_migration(slot)
    assert migration.finished
    assert cluster.master_for_slot(slot) is target


def test_killed_cluster_master_rejoins_with_its_identity(cluster: LocalCluster) -> None:
    """heal() restarts a killed master, which rejoins with its id and slots, empty, and ok."""
    victim = cluster.masters[1]
    key = _key_served_by(cluster, victim)
    with victim.client() as client:
        before = client.execute_command("CLUSTER", "MYID")
        client.set(key, b"v")
    victim.kill()
    cluster.heal()
    with victim.client() as client:
        assert client.execute_command("CLUSTER", "MYID") == before
        assert client.exists(key) == 0
    assert cluster.master_for_slot(key_slot(key)) is victim
    cluster.flushall()  # reaches the replicas (WAIT) once they have resynced


# -- the pytest plugin --------------------------------------------------------------------
# These two run in file order: the first leaves dirt and damage, the second sees none.


def test_plugin_first_leaves_data_and_broken_nodes(
    stampede_primaries: LocalPrimaries, stampede_cluster: LocalCluster
) -> None:
    """(Setup for the next test) leaves data everywhere, a killed and a paused primary."""
    for member in stampede_primaries.nodes:
        with member.client() as client:
            client.set(b"left-over", b"1")
    with RedisCluster.from_url(stampede_cluster.url) as client:
        client.set(b"left-over", b"1")
    stampede_primaries.nodes[0].kill()
    stampede_primaries.nodes[1].pause()


def test_plugin_second_finds_servers_empty_and_healed(
    stampede_primaries: LocalPrimaries, stampede_cluster: LocalCluster
) -> None:
    """The autouse fixture heals killed and paused nodes and empties every server before a test."""
    for member in stampede_primaries.nodes:
        assert member.is_running and not member.is_paused
        with member.client(socket_timeout=2) as client:
            assert client.dbsize() == 0
    for member in stampede_cluster.masters:
        with member.client() as client:
            assert client.dbsize() == 0


async def test_async_tests_can_use_the_session_servers(stampede_primaries: LocalPrimaries) -> None:
    """An async test reaches the shared primaries with redis.asyncio, on the session loop."""
    client = redis.asyncio.Redis.from_url(stampede_primaries.urls[0])
    try:
        await client.set(b"k", b"v")
        assert await client.get(b"k") == b"v"
    finally:
        await client.aclose()


def test_backend_defaults_to_local_and_env_selects_docker(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STAMPEDE_TEST_REDIS picks the backend (local by default); docker builds docker classes."""
    from stampede.testing.plugin import backend_of

    if pytestconfig.getoption("stampede_redis") is not None:
        pytest.skip("--stampede-redis given: it overrides the environment variable")
    monkeypatch.delenv("STAMPEDE_TEST_REDIS", raising=False)
    assert backend_of(pytestconfig) == "local"
    monkeypatch.setenv("STAMPEDE_TEST_REDIS", "docker")
    assert backend_of(pytestconfig) == "docker"
    assert isinstance(make_primaries("docker"), DockerPrimaries)
    assert isinstance(make_cluster("docker"), DockerCluster)
    monkeypatch.setenv("STAMPEDE_TEST_REDIS", "podman")
    with pytest.raises(pytest.UsageError, match="expected 'local' or 'docker'"):
        backend_of(pytestconfig)


# -- docker backend (no Docker engine here: only what runs without one) -------------------


def test_docker_node_cannot_be_signalled() -> None:
    """On the docker backend kill/pause/resume/restart raise NotImplementedError."""
    node = DockerNode()
    for action in (node.kill, node.pause, node.resume, node.restart):
        with pytest.raises(NotImplementedError, match="STAMPEDE_TEST_REDIS=local"):
            action()


@pytest.mark.skipif(
    importlib.util.find_spec("testcontainers") is not None, reason="testcontainers installed"
)
def test_docker_backend_without_the_extra_says_what_to_install() -> None:
    """Without testcontainers, starting a docker node says what to install:
    pip install 'stampede-redis[docker]'."""
    with pytest.raises(HarnessError, match=r"pip install 'stampede-redis\[docker\]'"):
        DockerNode().start()


def test_meet_missing_joins_a_node_that_forgot_the_others() -> None:
    """A node whose handshakes were dropped (it lists only itself) is met again: the
    cluster bootstrap sends the missing MEETs once a second while it waits."""
    nodes = [RedisNode(cluster_enabled=True) for _ in range(3)]
    try:
        for node in nodes:
            node.start()
        # node 0 meets both others; later nodes may already list some through it
        assert meet_missing(nodes) >= 2
        wait_for(lambda: _handshake_problems(nodes), timeout=30, what="nodes did not meet")
        assert meet_missing(nodes) == 0
        command(nodes[0], "CLUSTER", "RESET", "SOFT")  # as a dropped handshake leaves it
        assert _handshake_problems(nodes)
        assert meet_missing(nodes) >= 2  # node 0 meets both others again
        wait_for(lambda: _handshake_problems(nodes), timeout=30, what="nodes did not meet again")
    finally:
        stop_nodes(nodes)
