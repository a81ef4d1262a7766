"""docker/ and the testcontainers backend (stampede.testing.docker).

Without a Docker engine (`make test`): compose.yml, its local override and the
Dockerfile are parsed and checked, the cluster scripts of compose.yml run against
local redis-server processes, `config` runs where a compose client works, and the
backend's errors are checked where testcontainers is installed.

With STAMPEDE_DOCKER_CHECK=1 (set by `make docker-check`, which starts an engine and
builds the local images first): `DockerNode`, `DockerPrimaries` and `DockerCluster`
run real containers. docker/check/run.sh then starts compose.yml itself.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

import stampede
from stampede.cli._demo import DemoConfig, run_demo
from stampede.cli._repair import worker_command
from stampede.testing import DockerCluster, DockerNode, DockerPrimaries, HarnessError
from stampede.testing._server import launcher
from stampede.testing.docker import explain_start_error

from ..support import spread_keys

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
NODES = [f"cluster-{i}" for i in range(6)]
PRIMARIES = ["primary-a", "primary-b"]
WORKERS = ["worker", "worker-cluster"]
ENGINE = os.environ.get("STAMPEDE_DOCKER_CHECK") == "1"
needs_engine = pytest.mark.skipif(
    not ENGINE,
    reason="needs a Docker engine and the local images: `make docker-check` runs these",
)


def compose(name: str = "compose.yml") -> dict[str, Any]:
    """A compose file of docker/ as parsed YAML (anchors and merge keys resolved)."""
    data = yaml.safe_load((DOCKER / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service(name: str, file: str = "compose.yml") -> dict[str, Any]:
    found = compose(file)["services"][name]
    assert isinstance(found, dict)
    return found


def interpolate(text: str) -> str:
    """Compose's `${VAR:-default}` with the defaults (the environment ignored)."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


def script(name: str) -> str:
    """The shell script of a `sh -c` service, as the container's shell receives it."""
    command = service(name)["command"]
    assert command[:2] == ["sh", "-c"], command
    return str(command[2]).replace("$$", "$")


def published(name: str) -> dict[int, int]:
    """container port -> host port, for every published port of a service."""
    out = {}
    for spec in service(name).get("ports", []):
        host, container = interpolate(str(spec)).split(":")
        out[int(container)] = int(host)
    return out


def test_services_are_the_documented_ones() -> None:
    """Two primaries, six cluster nodes, the one-shot init and two workers; nothing else."""
    assert set(compose()["services"]) == {*PRIMARIES, *NODES, "cluster-init", *WORKERS}


def test_primaries_are_independent_and_published() -> None:
    """Each primary is a plain redis-server (no cluster mode) on its own host port."""
    ports = []
    for name in PRIMARIES:
        svc = service(name)
        assert svc["image"].startswith("redis:7")
        assert "--cluster-enabled" not in svc["command"]
        assert "--protected-mode" in svc["command"] and svc["healthcheck"]["test"]
        ports.append(published(name)[6379])
    assert ports == [6379, 6380]


def test_host_ports_are_unique() -> None:
    """No two services publish the same host port."""
    hosts = [port for name in compose()["services"] for port in published(name).values()]
    assert len(hosts) == len(set(hosts))


def test_cluster_nodes_announce_reachable_addresses() -> None:
    """Every node runs in cluster mode and announces an IP plus its published port and bus port."""
    for i, name in enumerate(NODES):
        svc, text = service(name), script(name)
        port = int(svc["environment"]["PORT"])
        assert port == 7000 + i
        assert published(name) == {port: port, port + 10000: port + 10000}
        assert "--cluster-enabled yes" in text
        assert '--cluster-announce-ip "$ip"' in text
        assert '--cluster-announce-port "$PORT"' in text
        assert '--cluster-announce-bus-port "$((PORT + 10000))"' in text
        assert svc["environment"]["STAMPEDE_ANNOUNCE_IP"] == "${STAMPEDE_ANNOUNCE_IP:-}"
        assert "host.docker.internal:host-gateway" in svc["extra_hosts"]
        assert "$PORT" in svc["healthcheck"]["test"][1]


def test_cluster_init_waits_for_every_node_and_adds_one_replica_per_master() -> None:
    """The init service depends on all six healthy nodes and creates 3 masters + 3 replicas."""
    init = service("cluster-init")
    assert init["restart"] == "no"
    assert init["depends_on"] == {n: {"condition": "service_healthy"} for n in NODES}
    text = " ".join(script("cluster-init").replace("\\\n", " ").split())
    create = re.search(
        r"redis-cli --cluster create (.*?) --cluster-replicas (\d+) --cluster-yes", text
    )
    assert create is not None, text
    addresses = shlex.split(create.group(1))
    assert addresses == [f"$ip:{7000 + i}" for i in range(6)]
    assert int(create.group(2)) == 1


def test_workers_build_the_dockerfile_and_run_stampede_worker() -> None:
    """Both workers build docker/Dockerfile, pass `stampede worker` valid arguments and
    publish their metrics port."""
    services = compose()["services"]
    for name in WORKERS:
        svc = service(name)
        context = (DOCKER / svc["build"]["context"]).resolve()
        assert context == ROOT and (context / svc["build"]["dockerfile"]).is_file()
        args = [str(a) for a in svc["command"]]
        ctx = worker_command.make_context("worker", list(args))  # parses like the CLI does
        assert ctx.params["strategy"] == "newest-wins"
        # metrics reachable from the host: bound to every address, port published
        port = ctx.params["metrics_port"]
        assert ctx.params["metrics_host"] == "0.0.0.0"
        assert published(name) == {port: port}
        for url in ctx.params["urls"]:
            host, port = url.removeprefix("redis://").split(":")
            assert host in services, url
            assert int(port) in published(host), url
    assert service("worker")["depends_on"] == {
        p: {"condition": "service_healthy"} for p in PRIMARIES
    }
    cluster = service("worker-cluster")
    assert "--cluster" in cluster["command"]
    assert cluster["depends_on"] == {
        "cluster-init": {"condition": "service_completed_successfully"}
    }


def test_dockerfile_installs_the_project_and_runs_the_worker() -> None:
    """python:3.11-slim by default (a build argument), the project installed with pip
    with the cli extra `stampede worker` needs, entrypoint `stampede worker`."""
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", text, re.M)
    assert "pip install '.[cli]'" in text
    assert 'ENTRYPOINT ["stampede", "worker"]' in text
    for copied in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in copied.split():
            assert (ROOT / path).exists(), path
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    assert "!src/" in ignore and "!pyproject.toml" in ignore and "!README.md" in ignore


def test_readme_records_what_ran() -> None:
    """docker/README.md records the docker-check run (engine, compose) and the commands."""
    text = (DOCKER / "README.md").read_text(encoding="utf-8")
    assert "No container has been started" not in text
    assert "make docker-check" in text and "docker-compose version 1.29" in text
    assert re.search(r"Docker Engine 20\.10", text)
    assert "stampede demo --url" in text and "stampede worker --url" in text


# -- the local override (compose.local.yml) ------------------------------------------------


def test_local_override_runs_everything_on_the_loopback() -> None:
    """Every service of compose.yml is in the override, host-networked, on a local image;
    every server binds 127.0.0.1 off 6379; the workers build the Dockerfile on a local base."""
    local = compose("compose.local.yml")["services"]
    assert set(local) == set(compose()["services"])
    for name, svc in local.items():
        assert svc["network_mode"] == "host", name
        assert interpolate(svc["image"]).endswith(":local"), name
    ports = []
    for name in PRIMARIES:
        svc = local[name]
        port = int(interpolate(svc["environment"]["PORT"]))
        ports.append(port)
        assert '--port "$$PORT" --bind 127.0.0.1' in svc["command"][2]
        assert "-p $$PORT" in svc["healthcheck"]["test"][1]  # not the host's 6379
    assert 6379 not in ports and len(set(ports)) == 2
    for name in NODES:
        assert local[name]["environment"]["STAMPEDE_BIND"] == "127.0.0.1"
        assert "${STAMPEDE_BIND:+--bind" in service(name)["command"][2]
    for name in WORKERS:
        svc = local[name]
        assert svc["build"]["network"] == "host"
        assert interpolate(svc["build"]["args"]["PYTHON_IMAGE"]) == "stampede-python:local"
        args = [interpolate(str(a)) for a in svc["command"]]
        ctx = worker_command.make_context("worker", args)
        assert ctx.params["metrics_host"] == "127.0.0.1"
        assert all(url.startswith("redis://127.0.0.1:") for url in ctx.params["urls"])
    urls = worker_command.make_context(
        "worker", [interpolate(str(a)) for a in local["worker"]["command"]]
    ).params["urls"]
    assert list(urls) == [f"redis://127.0.0.1:{port}" for port in ports]


def test_drop_ports_removes_published_ports_of_host_networked_services() -> None:
    """docker/check/drop_ports.py: compose 1.x refuses ports with host networking."""
    merged = {
        "services": {
            "a": {"network_mode": "host", "ports": ["1:1"], "image": "x"},
            "b": {"ports": ["2:2"], "image": "y"},
        }
    }
    done = subprocess.run(
        [sys.executable, str(DOCKER / "check" / "drop_ports.py")],
        input=yaml.safe_dump(merged),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    out = yaml.safe_load(done.stdout)["services"]
    assert out == {"a": {"network_mode": "host", "image": "x"}, "b": merged["services"]["b"]}


def compose_client() -> list[str] | None:
    """`docker compose` or `docker-compose`, whichever answers `version`; else None."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        try:
            done = subprocess.run(
                [*command, "version"], capture_output=True, timeout=20, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return command
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    """`docker compose config` (no engine needed) accepts compose.yml, where a client exists."""
    command = compose_client()
    if command is None:
        pytest.skip(
            "no working compose client: neither `docker compose version` nor "
            "`docker-compose version` succeeds here; the parsing checks above still ran"
        )
    for files in (["compose.yml"], ["compose.yml", "compose.local.yml"]):
        options = [arg for name in files for arg in ("-f", str(DOCKER / name))]
        done = subprocess.run(
            [*command, *options, "config", "--quiet"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def free_port_pair() -> int:
    """A free TCP port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


@pytest.fixture
def compose_cluster(tmp_path: Path) -> Iterator[list[int]]:
    """The six cluster-node scripts of compose.yml, run on local ports; their ports."""
    ports = [free_port_pair() for _ in NODES]
    env = {**os.environ, "STAMPEDE_ANNOUNCE_IP": "127.0.0.1"}
    procs = []
    try:
        for name, port in zip(NODES, ports, strict=True):
            workdir = tmp_path / name
            workdir.mkdir()
            with (workdir / "redis.log").open("w") as log:
                procs.append(
                    subprocess.Popen(
                        [*launcher(), "sh", "-c", script(name)],
                        cwd=workdir,
                        env={**env, "PORT": str(port)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        for port in ports:
            wait_for_ping(port)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for_ping(port: int, within: float = 15.0) -> None:
    client = redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5)
    deadline = time.monotonic() + within
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
    finally:
        client.close()


def cluster_nodes(port: int, within: float = 15.0) -> list[list[str]]:
    """CLUSTER NODES of one node, once it sees 3 masters with slots and 3 replicas."""
    client = redis.Redis(port=port, decode_responses=True)
    deadline = time.monotonic() + within
    try:
        while True:
            # redis-py leaves execute_command unannotated.
            reply = str(client.execute_command("CLUSTER", "NODES"))  # type: ignore[no-untyped-call]
            lines = [line.split() for line in reply.splitlines()]
            masters = [f for f in lines if "master" in f[2] and len(f) > 8]
            replicas = [f for f in lines if "slave" in f[2]]
            if (len(masters) == 3 and len(replicas) == 3) or time.monotonic() > deadline:
                assert (len(masters), len(replicas)) == (3, 3), reply
                return lines
            time.sleep(0.1)
    finally:
        client.close()


async def test_compose_scripts_form_a_cluster_the_demo_runs_on(compose_cluster: list[int]) -> None:
    """The node and init scripts of compose.yml, run against local redis-server processes,
    form a 3-master, 3-replica cluster announcing the given IP, and the demo runs on it."""
    ports = compose_cluster
    init = re.sub(r"\b700([0-5])\b", lambda m: str(ports[int(m.group(1))]), script("cluster-init"))
    done = await asyncio.to_thread(
        subprocess.run,
        ["sh", "-c", init],
        env={**os.environ, "STAMPEDE_ANNOUNCE_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cluster ready" in done.stdout
    lines = await asyncio.to_thread(cluster_nodes, ports[0])
    announced = sorted(fields[1].split(",")[0] for fields in lines)
    assert announced == sorted(f"127.0.0.1:{p}@{p + 10000}" for p in ports)
    config = DemoConfig(size=30, duration=1.0, seed=5)
    summary = await run_demo([f"redis://127.0.0.1:{ports[0]}"], cluster=True, config=config)
    assert summary.ok and summary.counters.writes > 0, summary.as_dict()


# -- the testcontainers backend: its errors (no engine needed) -----------------------------


def test_start_errors_are_one_line_and_name_what_is_missing() -> None:
    """Each way a container fails to start is explained in one line."""
    cases = {
        "permission denied on the Docker socket": PermissionError(13, "Permission denied"),
        "Ryuk": RuntimeError("could not start testcontainers/ryuk:0.8.1"),
        "image stampede-x:1 is not on this engine": RuntimeError(
            "404 Client Error for http+docker://localhost/v1.41/images/create: pull access denied"
        ),
        "STAMPEDE_TEST_DOCKER_NETWORK=host": RuntimeError("network bridge not found"),
        "no Docker engine answers": RuntimeError(
            "Error while fetching server API version: ('Connection aborted.', "
            "FileNotFoundError(2, 'No such file or directory'))"
        ),
    }
    for expected, exc in cases.items():
        message = explain_start_error(exc, "stampede-x:1")
        assert expected in message and "\n" not in message, message


def test_docker_node_without_an_engine_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No engine at DOCKER_HOST: a one-line HarnessError naming the socket."""
    pytest.importorskip("testcontainers", reason="needs the docker extra (testcontainers)")
    socket_url = f"unix://{tmp_path}/no-engine.sock"
    monkeypatch.setenv("DOCKER_HOST", socket_url)
    with pytest.raises(HarnessError) as raised:
        DockerNode(network="host").start()
    message = str(raised.value)
    assert f"no Docker engine answers at {socket_url}" in message and "\n" not in message


# -- the testcontainers backend on a real engine (make docker-check) -----------------------


def _engine() -> Any:
    """docker-py's client (imported by name: `docker` here is also the repository's folder)."""
    return importlib.import_module("docker").from_env()


@needs_engine
def test_docker_node_answers_logs_and_is_removed() -> None:
    """A DockerNode runs the image, answers, shows its log, and its container goes on stop()."""
    node = DockerNode()
    node.start()
    try:
        container_id = node.container_id
        client = node.client()
        try:
            client.set("docker:k", "v")
            assert client.get("docker:k") == b"v"
        finally:
            client.close()
        assert "Ready to accept connections" in node.log_tail()
        assert (node.pid, node.is_running, container_id) == (None, True, container_id)
        assert container_id is not None
    finally:
        node.stop()
    assert not node.is_running
    assert _engine().containers.list(all=True, filters={"id": container_id}) == []


@needs_engine
def test_docker_node_with_a_missing_image_says_so_in_one_line() -> None:
    """An image that is neither on the engine nor pullable: one line naming it."""
    image = "localhost:1/stampede-missing:none"  # a pull fails at once, on the loopback
    with pytest.raises(HarnessError) as raised:
        DockerNode(image=image).start()
    message = str(raised.value)
    assert f"image {image} is not on this engine" in message and "\n" not in message


@needs_engine
async def test_docker_primaries_carry_a_stamped_group() -> None:
    """Two primaries in containers: a group written across both reads back consistent."""
    with DockerPrimaries(2) as primaries:
        assert len(primaries.urls) == 2
        async with stampede.connect(primaries.urls) as st:
            keys = spread_keys(st, "docker:1", 3)
            receipt = await st.write("docker:1", {k: k.encode() for k in keys})
            result = await st.read("docker:1", keys)
            assert result.consistent and result.version == receipt.version
        primaries.flushall()
        for node in primaries.nodes:
            client = node.client()
            try:
                assert client.dbsize() == 0
            finally:
                client.close()


@needs_engine
async def test_docker_cluster_migrates_a_slot_and_the_demo_runs_on_it() -> None:
    """Three masters and three replicas in host-networked containers: a slot migrates
    with its key, and the demo runs with no torn group left."""
    with DockerCluster(3, 1) as cluster:
        assert len(cluster.nodes) == 6
        client = cluster.masters[0].client()
        try:
            reply = client.execute_command("CLUSTER", "KEYSLOT", "docker:moved")  # type: ignore[no-untyped-call]
            slot = int(reply)
        finally:
            client.close()
        owner = cluster.master_for_slot(slot)
        owner_client = owner.client()
        try:
            owner_client.set("docker:moved", "v")
        finally:
            owner_client.close()
        target = next(m for m in cluster.masters if m is not owner)
        cluster.migrate_slot(slot, target)
        assert cluster.master_for_slot(slot) is target
        config = DemoConfig(size=30, duration=1.0, seed=7)
        summary = await run_demo([cluster.url], cluster=True, config=config)
        assert summary.ok and summary.counters.writes > 0, summary.as_dict()
