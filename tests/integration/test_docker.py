"""docker/: compose.yml, the Dockerfile and the scripts they run.

No Docker engine is needed: the files are parsed and checked, and the cluster
scripts of compose.yml run against local redis-server processes. Only
`docker compose config` needs a compose client; it runs where one works.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from stampede.cli._demo import DemoConfig, run_demo
from stampede.cli._repair import worker_command
from stampede.testing._server import launcher

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
NODES = [f"cluster-{i}" for i in range(6)]
PRIMARIES = ["primary-a", "primary-b"]
WORKERS = ["worker", "worker-cluster"]


def compose() -> dict[str, Any]:
    """docker/compose.yml as parsed YAML (anchors and merge keys resolved)."""
    data = yaml.safe_load((DOCKER / "compose.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service(name: str) -> dict[str, Any]:
    found = compose()["services"][name]
    assert isinstance(found, dict)
    return found


def script(name: str) -> str:
    """The shell script of a `sh -c` service, as the container's shell receives it."""
    command = service(name)["command"]
    assert command[:2] == ["sh", "-c"], command
    return str(command[2]).replace("$$", "$")


def published(name: str) -> dict[int, int]:
    """container port -> host port, for every published port of a service."""
    out = {}
    for spec in service(name).get("ports", []):
        host, container = str(spec).split(":")
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
    """python:3.11-slim, the project installed with pip, entrypoint `stampede worker`."""
    text = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert re.search(r"pip install \.", text)
    assert 'ENTRYPOINT ["stampede", "worker"]' in text
    for copied in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in copied.split():
            assert (ROOT / path).exists(), path
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8")
    assert "!src/" in ignore and "!pyproject.toml" in ignore and "!README.md" in ignore


def test_readme_says_what_was_not_run() -> None:
    """docker/README.md says plainly that no container was started from these files."""
    text = (DOCKER / "README.md").read_text(encoding="utf-8")
    assert "No container has been started" in text
    assert "stampede demo --url" in text and "stampede worker --url" in text


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
    done = subprocess.run(
        [*command, "-f", str(DOCKER / "compose.yml"), "config", "--quiet"],
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
