#!/usr/bin/env bash
# `make docker-check`: docker/ and the testcontainers backend on a real Docker engine.
#
#  1. An engine: the one that answers (DOCKER_HOST or the default socket), else a
#     private dockerd started here as root (apt-get install docker.io if needed) with
#     its own data root, exec root, pid file and socket in a temporary directory,
#     no bridge and no iptables: every container uses host networking, every server
#     binds 127.0.0.1, every packet stays on the loopback interface.
#  2. The local images (no registry needed): stampede-redis:local (this machine's
#     redis-server, redis-cli and their libraries) and stampede-python:local (Debian's
#     python3 by debootstrap from apt's mirror). docker/Dockerfile is built on the
#     latter by compose.
#  3. tests/integration/test_docker.py with STAMPEDE_DOCKER_CHECK=1: DockerNode,
#     DockerPrimaries and DockerCluster on containers.
#  4. docker/compose.yml with docker/compose.local.yml: two primaries, the six-node
#     cluster formed by cluster-init, both workers; `stampede demo --url` against the
#     primaries and the cluster; the workers' /healthz and /metrics.
#  5. On any exit: compose down, leftover containers removed, the private engine
#     stopped, its mounts unmounted, the temporary directory removed.
#
# Environment: STAMPEDE_DOCKER_ENGINE=private starts a private engine even when one
# answers; STAMPEDE_PRIMARY_A_PORT / _B_PORT (6479, 6480) move the primaries;
# DEMO_SECONDS (5) is each demo's load time. Anything missing is said in one line.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=${PY:-$ROOT/.venv/bin/python}
VENV_BIN=$(dirname "$PY")
PROJECT=stampede-check
REDIS_IMAGE=stampede-redis:local
PYTHON_IMAGE=stampede-python:local
WORKER_IMAGE=stampede-worker:local
A_PORT=${STAMPEDE_PRIMARY_A_PORT:-6479}
B_PORT=${STAMPEDE_PRIMARY_B_PORT:-6480}
export STAMPEDE_PRIMARY_A_PORT=$A_PORT STAMPEDE_PRIMARY_B_PORT=$B_PORT
DEMO_SECONDS=${DEMO_SECONDS:-5}
STARTED=$(date +%s)

STATE=""
DOCKERD_PID=""
PRIVATE=0
UP=0
MERGED=""
COMPOSE=()
APT_UPDATED=0

say() { printf 'docker-check: %s\n' "$*"; }
die() {
	printf 'docker-check: %s\n' "$*" >&2
	exit 1
}

# -- cleanup: runs on every exit ---------------------------------------------------------

stop_private_engine() {
	[ -n "$DOCKERD_PID" ] || return 0
	kill -TERM "$DOCKERD_PID" 2>/dev/null || true
	for _ in $(seq 1 60); do
		kill -0 "$DOCKERD_PID" 2>/dev/null || break
		sleep 0.5
	done
	if kill -0 "$DOCKERD_PID" 2>/dev/null; then
		say "dockerd did not stop in 30 s: killing it"
		kill -KILL "$DOCKERD_PID" 2>/dev/null || true
	fi
	wait "$DOCKERD_PID" 2>/dev/null || true
	# containerd and its shims, had dockerd not stopped them: ours name our directory
	local pid
	for pid in $(pgrep -f -- "$STATE/" || true); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	# what the engine mounted under its roots (overlays, network namespaces, shm)
	local mount
	for mount in $(awk -v root="$STATE/" 'index($2, root) == 1 {print $2}' /proc/self/mounts | sort -r); do
		umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || say "could not unmount $mount"
	done
	DOCKERD_PID=""
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ "$UP" = 1 ]; then
		if [ "$rc" != 0 ]; then
			say "compose logs (last lines):"
			"${COMPOSE[@]}" -p "$PROJECT" -f "$MERGED" logs --no-color --tail 15 2>&1 | tail -n 60
		fi
		"${COMPOSE[@]}" -p "$PROJECT" -f "$MERGED" down --volumes --remove-orphans --timeout 20 \
			>"$STATE/down.log" 2>&1 || say "compose down failed: $(tail -n1 "$STATE/down.log")"
	fi
	if [ -n "$DOCKERD_PID" ] || [ "$PRIVATE" = 0 ]; then
		# containers the tests may have left (an interrupted run): ours run our images
		local image ids
		for image in "$REDIS_IMAGE" "$WORKER_IMAGE"; do
			ids=$(docker ps -aq --filter "ancestor=$image" 2>/dev/null)
			[ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
		done
	fi
	if [ "$PRIVATE" = 1 ]; then
		[ "$rc" = 0 ] || { say "dockerd log (last lines):"; tail -n 5 "$STATE/dockerd.log" 2>/dev/null; }
		stop_private_engine
	elif [ "${STAMPEDE_DOCKER_KEEP_IMAGES:-0}" != 1 ]; then
		docker rmi "$WORKER_IMAGE" "$PYTHON_IMAGE" "$REDIS_IMAGE" >/dev/null 2>&1
	fi
	[ -n "$STATE" ] || exit "$rc" # stopped before anything was set up: its one line said why
	rm -rf "$STATE"
	local took=$(($(date +%s) - STARTED))
	if [ "$rc" = 0 ]; then
		say "PASS in ${took}s; engine, containers and temporary files removed"
	else
		say "FAILED (exit $rc) after ${took}s; engine, containers and temporary files removed"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- what the check needs on this machine -----------------------------------------------

# apt_install WHAT PACKAGE...: install with apt-get as root, else say what to install
apt_install() {
	local what=$1
	shift
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		die "$what not found: install it (Debian/Ubuntu: apt-get install $*)"
	fi
	say "installing $* with apt-get"
	local guard=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then # no service may start during the install
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
	fi
	local ok=1
	if [ "$APT_UPDATED" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 && APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
		>/dev/null 2>&1 || ok=0
	[ "$guard" = 0 ] || rm -f /usr/sbin/policy-rc.d
	[ "$ok" = 1 ] || die "apt-get install $* failed"
}

need_tools() {
	[ -x "$PY" ] || die "no $PY: run make docker-check (it creates the venv)"
	"$PY" -c "import testcontainers" 2>/dev/null ||
		die "testcontainers missing in $PY: pip install -e '.[dev,docker]'"
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
		apt_install "redis-server" redis-server
	command -v debootstrap >/dev/null || apt_install "debootstrap" debootstrap
}

# -- the engine -------------------------------------------------------------------------

start_private_engine() {
	[ "$(id -u)" = 0 ] || die "no Docker engine answers at ${DOCKER_HOST:-unix:///var/run/docker.sock}, and a private one needs root: start Docker (or set DOCKER_HOST), or run as root"
	command -v dockerd >/dev/null && command -v docker >/dev/null || apt_install "dockerd" docker.io
	# not tmpfs: overlay2 wants a real file system under its data root
	STATE=$(mktemp -d "${STAMPEDE_DOCKER_STATE:-/var/tmp}/stampede-docker.XXXXXX")
	echo '{}' >"$STATE/daemon.json" # none of /etc/docker/daemon.json
	PRIVATE=1
	dockerd --config-file "$STATE/daemon.json" --data-root "$STATE/data" \
		--exec-root "$STATE/exec" --pidfile "$STATE/dockerd.pid" -H "unix://$STATE/docker.sock" \
		--bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
		--userland-proxy=false --host-gateway-ip=127.0.0.1 >"$STATE/dockerd.log" 2>&1 &
	DOCKERD_PID=$!
	export DOCKER_HOST="unix://$STATE/docker.sock"
	for _ in $(seq 1 60); do
		docker version >/dev/null 2>&1 && return 0
		kill -0 "$DOCKERD_PID" 2>/dev/null || die "the private dockerd exited: $(tail -n1 "$STATE/dockerd.log")"
		sleep 0.5
	done
	die "the private dockerd did not answer in 30 s: $(tail -n1 "$STATE/dockerd.log")"
}

choose_engine() {
	local out
	if [ "${STAMPEDE_DOCKER_ENGINE:-auto}" != private ] && command -v docker >/dev/null; then
		if out=$(docker version --format '{{.Server.Version}}' 2>&1); then
			say "using the engine that answers at ${DOCKER_HOST:-the default socket}"
			STATE=$(mktemp -d "${STAMPEDE_DOCKER_STATE:-/var/tmp}/stampede-docker.XXXXXX")
			return 0
		fi
		case $out in
		*"permission denied"*)
			die "permission denied on the Docker socket ${DOCKER_HOST:-unix:///var/run/docker.sock}: add your user to the 'docker' group, or run as root"
			;;
		esac
		[ -z "${DOCKER_HOST:-}" ] ||
			die "no Docker engine answers at DOCKER_HOST=$DOCKER_HOST: start it, or unset DOCKER_HOST for a private engine (as root)"
	fi
	start_private_engine
	say "started a private dockerd (pid $DOCKERD_PID) at $DOCKER_HOST: no bridge, no iptables"
}

choose_compose() {
	if docker compose version >/dev/null 2>&1; then
		COMPOSE=(docker compose)
	elif command -v docker-compose >/dev/null && docker-compose version >/dev/null 2>&1; then
		COMPOSE=(docker-compose)
	else
		apt_install "a compose client (docker compose or docker-compose)" docker-compose
		COMPOSE=(docker-compose)
	fi
}

check_room() {
	local free_kb
	free_kb=$(df -Pk "$STATE" | awk 'NR == 2 {print $4}')
	[ "$free_kb" -ge 2097152 ] || die "less than 2 GB free under $STATE ($((free_kb / 1024)) MB): the images and containers need about 1 GB"
	local port
	for port in "$A_PORT" "$B_PORT" 7000 7001 7002 7003 7004 7005 17000 17001 17002 17003 17004 17005 9108 9109; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			die "127.0.0.1:$port is taken; the check needs it (STAMPEDE_PRIMARY_A_PORT / _B_PORT move the primaries)"
		fi
	done
}

# -- the local images -------------------------------------------------------------------

build_images() {
	say "image $REDIS_IMAGE: $(redis-server --version | awk '{print $3}') from $(command -v redis-server) with its libraries"
	bash docker/check/redis-rootfs.sh "$STATE/redis-root" || die "could not assemble the Redis root file system"
	tar -C "$STATE/redis-root" --numeric-owner -c . |
		docker import --change 'WORKDIR /data' --change 'CMD ["redis-server"]' - "$REDIS_IMAGE" >/dev/null
	rm -rf "$STATE/redis-root"
	say "image $PYTHON_IMAGE: debootstrap of Debian's python3 (about a minute)"
	bash docker/check/python-rootfs.sh "$STATE/python-root" || die "could not make the Python base"
	tar -C "$STATE/python-root" --numeric-owner -c . |
		docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["python3"]' - "$PYTHON_IMAGE" >/dev/null
	rm -rf "$STATE/python-root" "$STATE/python-root.log"
}

# -- the checks -------------------------------------------------------------------------

run_backend_tests() {
	say "pytest tests/integration/test_docker.py on the engine (DockerNode, DockerPrimaries, DockerCluster)"
	STAMPEDE_DOCKER_CHECK=1 STAMPEDE_TEST_REDIS_IMAGE="$REDIS_IMAGE" \
		STAMPEDE_TEST_DOCKER_NETWORK=${STAMPEDE_TEST_DOCKER_NETWORK:-host} \
		TESTCONTAINERS_RYUK_DISABLED=true \
		"$VENV_BIN/pytest" -q -p no:cacheprovider tests/integration/test_docker.py ||
		die "tests/integration/test_docker.py failed on the engine (output above)"
}

compose_up() {
	MERGED="$STATE/compose.merged.yml"
	"${COMPOSE[@]}" -p "$PROJECT" -f docker/compose.yml -f docker/compose.local.yml config |
		"$PY" docker/check/drop_ports.py >"$MERGED"
	say "building $WORKER_IMAGE from docker/Dockerfile on $PYTHON_IMAGE (compose build)"
	"${COMPOSE[@]}" -p "$PROJECT" -f "$MERGED" build >"$STATE/build.log" 2>&1 ||
		die "compose build failed: $(grep -v '^\s*$' "$STATE/build.log" | tail -n1)"
	say "compose up: primaries on $A_PORT and $B_PORT, cluster on 7000-7005, cluster-init, two workers"
	UP=1
	"${COMPOSE[@]}" -p "$PROJECT" -f "$MERGED" up -d --no-build >"$STATE/up.log" 2>&1 ||
		die "compose up failed: $(grep -v '^\s*$' "$STATE/up.log" | tail -n1)"
	local init
	init=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
		--filter "label=com.docker.compose.service=cluster-init")
	[ "$(docker inspect --format '{{.State.ExitCode}}' "$init")" = 0 ] || die "cluster-init failed"
	docker logs "$init" 2>&1 | grep -q "cluster ready at 127.0.0.1:7000-7005" ||
		die "cluster-init did not report the cluster ready"
	say "cluster-init: $(docker logs "$init" 2>&1 | tail -n1)"
}

# demo NAME ARGS...: `stampede demo --json` must end with no torn group
demo() {
	local name=$1
	shift
	say "stampede demo $* --duration $DEMO_SECONDS"
	"$VENV_BIN/stampede" demo "$@" --duration "$DEMO_SECONDS" --size 100 --seed 24 --json \
		>"$STATE/demo-$name.json" 2>"$STATE/demo-$name.err" ||
		die "the demo on the $name failed: $(tail -n1 "$STATE/demo-$name.err")"
	"$PY" - "$STATE/demo-$name.json" "$name" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"docker-check: demo on the {sys.argv[2]}: {s['writes']} writes, "
      f"{s['reads']['torn_detected']} torn "
      f"reads seen, {s['worker']['repaired']} repaired by its worker, {s['torn_left']} torn left")
sys.exit(0 if s["torn_left"] == 0 else 1)
EOF
}

# worker_endpoints NAME PORT: /healthz 200 with every shard ok, /metrics with the worker's
worker_endpoints() {
	"$PY" - "$1" "$2" <<'EOF'
import sys, time, urllib.request
name, port = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
deadline, problem = time.monotonic() + 60, ""
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
            health = r.read().decode()
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            metrics = r.read().decode()
    except OSError as exc:  # not up yet, or 503 while a shard does not answer
        problem = str(exc)
        time.sleep(1)
        continue
    shards = [line for line in health.splitlines() if line.strip()]
    assert shards and all(line.endswith(" ok") for line in shards), health
    assert "stampede_worker_jobs_total" in metrics, metrics[:300]
    series = sum(1 for line in metrics.splitlines() if line.startswith("stampede_"))
    print(f"docker-check: {name} (:{port}): /healthz 200, {len(shards)} shards ok; "
          f"/metrics {series} stampede_ series")
    sys.exit(0)
sys.exit(f"docker-check: {name}: {base}/healthz not healthy in 60 s ({problem})")
EOF
}

versions() {
	local engine compose driver
	engine=$(docker version --format 'Docker Engine {{.Server.Version}} (API {{.Server.APIVersion}}), client {{.Client.Version}}')
	driver=$(docker info --format '{{.Driver}}, cgroup {{.CgroupVersion}}' 2>/dev/null)
	compose=$("${COMPOSE[@]}" version 2>/dev/null | head -n1)
	say "$engine; storage $driver; $compose"
}

need_tools
choose_engine
choose_compose
versions
check_room
build_images
run_backend_tests
compose_up
demo primaries --url "redis://127.0.0.1:$A_PORT" --url "redis://127.0.0.1:$B_PORT"
demo cluster --cluster --url redis://127.0.0.1:7000
worker_endpoints worker 9108
worker_endpoints worker-cluster 9109
