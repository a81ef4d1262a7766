"""What a guarded write costs the server, counted in instructions (callgrind).

    python -m benchmarks.server_instructions [--groups 300] [--rounds 3]

`benchmarks.server_cost` times the server's commands (`INFO commandstats`), which
moves with whatever else the machine does and with how many writes share one
script call. This counts instead: the same three primaries and 4-key groups, but
the third primary runs under `valgrind --tool=callgrind`, collecting only inside
command processing (`processCommand`: the command and the script's inner commands,
not the socket reads nor the server's timers), and the writes go one at a time, so
each call carries exactly the keys of one write on that server. Rows, each after
`FLUSHALL`, each writing every group `--rounds` times (the first round creates the
keys, the later ones replace them and keep what they replace):

- **MSET**: raw redis-py, one `MSET` per server of that group's keys there;
- **stampede write (stamp)**: `st.write(group, values)`, the guard script;
- **stampede write (stamp, one slot)**: the same with the group's keys sharing a
  hash tag, so one call on one server writes the whole group;
- **stampede transaction**: the spread keys as a read-atomic transaction (its
  prepare and commit scripts; each key's version hash collected as it commits).

Printed: instructions per key written on the measured server, and the ratio to
MSET's. The counts repeat to within a fraction of a percent from run to run,
whatever else the machine is doing. Needs `valgrind` (and `callgrind_control`) on
PATH; without it the script says so and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import redis
from redis.asyncio import Redis

import stampede
from stampede.testing import LocalPrimaries, find_server

KEYS_PER_GROUP = 4
VALUE = b"v" * 32
Write = Callable[[int], Awaitable[object]]
Row = tuple[Write, Callable[[int], list[str]]]


def spread_keys(g: int) -> list[str]:
    return [f"cost:{g}:{part}" for part in "abcd"]


def tagged_keys(g: int) -> list[str]:
    return [f"cost:{{{g}}}:{part}" for part in "abcd"]


class Counted:
    """A redis-server under callgrind, collecting inside `processCommand` only while
    `counting()` runs."""

    def __init__(self, binary: str) -> None:
        self.directory = tempfile.mkdtemp(prefix="stampede-cg-")
        self.out = os.path.join(self.directory, "callgrind.out")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--collect-atstart=no",
                "--toggle-collect=processCommand",
                f"--callgrind-out-file={self.out}",
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.directory,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.admin = redis.Redis(port=self.port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.admin.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("the server under valgrind did not start") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def _control(self, *args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(self.proc.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _total(self) -> int:
        """Instructions counted so far: dump, then add up every dump's totals."""
        before = len(glob.glob(self.out + ".*"))
        self._control("-d")
        deadline = time.monotonic() + 30
        while len(glob.glob(self.out + ".*")) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        total = 0
        for name in glob.glob(self.out + ".*"):
            with open(name) as dump:
                for line in dump:
                    if line.startswith("totals:"):
                        total += int(line.split()[1])
                        break
        return total

    async def counting(self, run: Callable[[], Awaitable[None]]) -> int:
        """Instructions the server spends in commands while `run` runs."""
        before = self._total()
        self._control("-i", "on")
        try:
            await run()
        finally:
            self._control("-i", "off")
        return self._total() - before

    def close(self) -> None:
        self.admin.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _rows(
    st: stampede.Stampede, clients: list[Redis]
) -> dict[str, tuple[Write, Callable[[int], list[str]]]]:
    index = {name: i for i, name in enumerate(st.topology.shard_names)}

    async def mset(g: int) -> object:
        by_server: dict[int, dict[str, bytes]] = {}
        for key in spread_keys(g):
            by_server.setdefault(index[st.topology.shard_of(key.encode())], {})[key] = VALUE
        for s, values in by_server.items():
            await clients[s].mset(values)
        return None

    async def stamp(g: int) -> object:
        return await st.write(f"cost:{g}", dict.fromkeys(spread_keys(g), VALUE))

    async def one_slot(g: int) -> object:
        return await st.write(f"cost:{{{g}}}", dict.fromkeys(tagged_keys(g), VALUE))

    async def transaction(g: int) -> object:
        async with st.transaction() as tx:
            for key in spread_keys(g):
                tx.set(key, VALUE)
        return tx.receipt

    return {
        "MSET": (mset, spread_keys),
        "stampede write (stamp)": (stamp, spread_keys),
        "stampede write (stamp, one slot)": (one_slot, tagged_keys),
        "stampede transaction": (transaction, spread_keys),
    }


async def measure(groups: int, rounds: int) -> dict[str, float]:
    """Per row: instructions per key written on the measured (third) primary."""
    out: dict[str, float] = {}
    binary = find_server(os.environ.get("STAMPEDE_TEST_SERVER")).path
    counted = Counted(binary)
    try:
        with LocalPrimaries(2) as prim:
            urls = [*prim.urls, counted.url]
            clients = [Redis.from_url(url) for url in urls]
            async with stampede.connect(urls) as st:
                measured = st.topology.shard_names[2]
                for name, (write, keys_of) in _rows(st, clients).items():
                    prim.flushall()
                    counted.admin.flushall()
                    await write(groups)  # scripts loaded, connections open: not counted

                    async def run(write: Write = write) -> None:
                        for _ in range(rounds):
                            for g in range(groups):
                                await write(g)

                    here = sum(
                        1
                        for g in range(groups)
                        for key in keys_of(g)
                        if st.topology.shard_of(key.encode()) == measured
                    )
                    spent = await counted.counting(run)
                    out[name] = spent / max(1, here * rounds)
            for client in clients:
                await client.aclose()
    finally:
        counted.close()
    return out


def report(results: dict[str, float], groups: int, rounds: int) -> None:
    base = results["MSET"]
    print(
        f"server instructions per key written (callgrind, in commands): 3 primaries, "
        f"{groups} groups of {KEYS_PER_GROUP} keys, {rounds} rounds, one write at a time"
    )
    for name, per_key in results.items():
        print(f"  {name:<34} {per_key:10,.0f} {per_key / base:6.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not on PATH: nothing to count", file=sys.stderr)
        raise SystemExit(2)
    report(asyncio.run(measure(args.groups, args.rounds)), args.groups, args.rounds)


if __name__ == "__main__":
    main()
