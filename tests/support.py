"""Helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

import stampede
from stampede import ConnectOptions, Envelope, Stampede
from stampede._kept import drop_kept
from stampede.repair import NewestWins
from stampede.wire import new_token

# A reply or a connection slower than these fails the call: generous enough for a
# machine whose two cores are busy (a 0.5 s connect timeout failed a loaded run),
# short enough that a test of a dead server does not wait long.
FAST = ConnectOptions(socket_timeout=1.0, connect_timeout=2.0, connection_retries=1)


def open_stampede(env: Any, kind: str, **overrides: Any) -> Stampede:
    """A `Stampede` over the harness object `env` (primaries or cluster)."""
    overrides.setdefault("connection", FAST)
    if kind == "cluster":
        return stampede.connect(env.url, cluster=True, **overrides)
    return stampede.connect(env.urls, **overrides)


def spread_keys(st: Stampede, prefix: str, count: int = 4) -> list[str]:
    """`count` keys of one group that land on at least two different shards."""
    keys = [f"{prefix}:{i}" for i in range(64)]
    chosen: list[str] = []
    shards: set[str] = set()
    for key in keys:
        shard = st.topology.shard_of(key.encode())
        if shard not in shards or len(shards) >= 3:
            chosen.append(key)
            shards.add(shard)
        if len(chosen) == count:
            break
    assert len({st.topology.shard_of(k.encode()) for k in chosen}) >= 2
    return chosen


def raw_get(address: str, key: str) -> bytes | None:
    """GET over a plain socket in RESP, bypassing every client library (and needing
    no redis-cli, which a bundled server does not ship); None for a missing key."""
    host, port = address.rsplit(":", 1)
    body = key.encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(body), body))
        reply = b""
        while b"\r\n" not in reply or not _complete(reply):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection mid-reply")
            reply += chunk
    header, _, rest = reply.partition(b"\r\n")
    if header == b"$-1":
        return None
    if not header.startswith(b"$"):
        raise AssertionError(f"unexpected reply to GET: {header[:80]!r}")
    return rest[: int(header[1:])]


def _complete(reply: bytes) -> bool:
    header, _, rest = reply.partition(b"\r\n")
    if not header.startswith(b"$") or header == b"$-1":
        return True
    return len(rest) >= int(header[1:]) + 2


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    """Wait until `check()` is true; fail with a clear message after `within` seconds.

    A check whose own call times out (`ShardTimeout`: the servers starved of CPU on a
    loaded machine for a moment) counts as "not yet", not as a failure: the verdict
    must not depend on the machine's speed. One still timing out at the end is raised.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for _ in itertools.count():
        try:
            if await check():
                return
        except stampede.ShardTimeout:
            if loop.time() > deadline:
                raise
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        await asyncio.sleep(0.05)


async def raw_value(st: Stampede, key: str) -> bytes | None:
    """What `key` holds on the server (a plain GET through the client's topology)."""
    value: bytes | None = await st.topology.execute(key.encode(), "GET", key)
    return value


async def gone(st: Stampede, key: str) -> None:
    """Wait until `key` holds nothing (its tombstone or TTL ran out): an event."""

    async def missing() -> bool:
        return await raw_value(st, key) is None

    await eventually(missing, within=30)


def child_env() -> dict[str, str]:
    """A CLI child's environment: the current directory (the tests' strategy modules)
    and the stampede these tests import on its path, so that a child run from a
    checkout (a git worktree) runs that checkout's code, not an installed copy."""
    code = os.path.dirname(os.path.dirname(os.path.abspath(stampede.__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), code])}


def run_cli(
    *args: str,
    timeout: float = 120.0,
    stdout: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m stampede.cli ARGS` (call it through asyncio.to_thread), with `env`
    added to its environment; its output is captured, or goes to the file descriptor
    `stdout`."""
    env = {**child_env(), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "stampede.cli", *args],
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        timeout=timeout,
        env=env,
        check=False,
    )


async def start_cli(*args: str) -> asyncio.subprocess.Process:
    """Start `python -m stampede.cli ARGS` as a child process, stderr piped."""
    env = child_env()
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "stampede.cli", *args, stderr=asyncio.subprocess.PIPE, env=env
    )


async def write_newer(st: Stampede, keys: Sequence[bytes], payload: bytes) -> tuple[int, str]:
    """Play a writer that died part way: a write just newer than what `keys[0]` holds,
    reaching `keys` only. Returns its (version, token)."""
    stored = Envelope.decode(await st.topology.execute(keys[0], "GET", keys[0]))
    version, token = stored.version + 1, new_token()
    value = Envelope(version, token, payload).encode()
    out = await st.topology.write_guarded(
        list(keys), [value] * len(keys), version=version, token=token
    )
    assert out.ok
    await drop_kept(st.topology, keys)  # it died long ago: no whole write is kept
    return version, token


@contextmanager
def tasks_created() -> Iterator[list[object]]:
    """Inside: the coroutine of every task the running loop creates, in a list."""
    loop = asyncio.get_running_loop()
    created: list[object] = []

    def count(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop)

    loop.set_task_factory(count)
    try:
        yield created
    finally:
        loop.set_task_factory(None)


async def without_expiry(st: Stampede, *, allowed: Sequence[str] = ()) -> list[bytes]:
    """Every key on every shard that has no expiry ("nothing immortal"), except the
    shard identity record and the keys in `allowed` (data written without a ttl)."""
    keep = {b"stampede:shard", *(k.encode() for k in allowed)}
    found: list[bytes] = []
    for shard in st.topology.shard_names:
        cursor: Any = b"0"
        while True:
            cursor, keys = await st.topology.execute_on(shard, "SCAN", cursor, "COUNT", 500)
            for key in set(keys) - keep:
                ttl = await st.topology.execute_on(shard, "PTTL", key)
                found += [key] if ttl == -1 else []
            if cursor in (b"0", 0, "0"):
                break
    return found


class Holding(NewestWins):
    """NewestWins that holds each repair until `release` is set, counting the calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[bytes] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def repair(self, ctx: Any, obs: Any, verdict: Any) -> Any:
        self.calls.append(obs.group)
        self.entered.set()
        await self.release.wait()
        return await super().repair(ctx, obs, verdict)


def caught_up(node: Any, replicas: int = 1, *, within: float = 60.0) -> None:
    """Block until `replicas` replicas of `node` hold every write it took so far: each
    replica, asked itself, has its link to `node` up and has applied `node`'s
    replication offset. Neither WAIT nor the primary's own view tells that alone: a
    WAIT that timed out (a replica still in its first sync on a loaded machine) says
    so only by its count, and Valkey 9 counts, and lists as online, a replica still
    loading its first sync, whose keyspace is empty until it is done."""
    deadline = time.monotonic() + within
    client = node.client()
    while True:
        client.wait(replicas, 200)
        info = client.info("replication")
        offset = int(info.get("master_repl_offset", 0))
        ready = 0
        for name, value in info.items():
            if not (name.startswith("slave") and isinstance(value, dict)):
                continue
            with redis.Redis(host=str(value["ip"]), port=int(value["port"])) as replica:
                seen = replica.info("replication")
            if (
                seen.get("master_link_status") == "up"
                and int(seen.get("slave_repl_offset", -1)) >= offset
            ):
                ready += 1
        if ready >= replicas:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{ready} of {replicas} replicas of {node} caught up in {within}s")
        time.sleep(0.05)
