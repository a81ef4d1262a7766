"""Slot computation: `stampede.keys.keyslot` against redis-py's `redis.crc.key_slot`.

    python -m benchmarks.keyslot [--keys 200000] [--rounds 9] [--json out.json]

Both functions hash the same keys in the same process: a seeded mix of tagged
(`prod:shop:cart:{<id>}:items`), untagged (`session:<id>:data`), empty-tag and
non-UTF-8 keys, as bytes. Each round times `list(map(f, keys))` for every
contender, in an order that rotates round by round so drift hits all alike; the
figure is the median over many short rounds, in keys per second. Also shown: the
batch form `keyslots(keys)`, and str keys (the UTF-8 ones), which stampede
encodes itself while redis-py's cluster client encodes, then calls `key_slot`.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.crc import key_slot

from stampede.keys import keyslot, keyslots

Run = Callable[[], object]


def make_keys(count: int, *, seed: int = 1) -> list[bytes]:
    """A seeded mix: 45% tagged, 45% untagged, 5% empty tag, 5% non-UTF-8."""
    rnd = random.Random(seed)
    keys = []
    for _ in range(count):
        ident = rnd.randrange(10**9)
        pick = rnd.random()
        if pick < 0.45:
            keys.append(f"prod:shop:cart:{{{ident}}}:items".encode())
        elif pick < 0.90:
            keys.append(f"session:{ident}:data".encode())
        elif pick < 0.95:
            keys.append(f"legacy:{{}}:{ident}".encode())
        else:
            keys.append(b"bin:\xff\xfe:" + ident.to_bytes(4, "big"))
    return keys


def contenders(keys: list[bytes], texts: list[str]) -> dict[str, tuple[Run, int]]:
    """Name -> (a call that hashes every key once, how many keys it hashes)."""
    return {
        "bytes: stampede keyslot": (lambda: list(map(keyslot, keys)), len(keys)),
        "bytes: redis-py key_slot": (lambda: list(map(key_slot, keys)), len(keys)),
        "bytes: stampede keyslots (batch)": (lambda: keyslots(keys), len(keys)),
        "str:   stampede keyslot": (lambda: list(map(keyslot, texts)), len(texts)),
        "str:   stampede keyslots (batch)": (lambda: keyslots(texts), len(texts)),
        "str:   redis-py encode + key_slot": (
            lambda: [key_slot(t.encode()) for t in texts],
            len(texts),
        ),
    }


def measure(runs: dict[str, Run], rounds: int) -> dict[str, list[float]]:
    """Seconds per round for each contender, order rotating each round, GC off while timing."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:  # warm up
        runs[name]()
    for round_ in range(rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            gc.disable()
            try:
                start = time.perf_counter()
                runs[name]()
                times[name].append(time.perf_counter() - start)
            finally:
                gc.enable()
    return times


def check(keys: Sequence[bytes]) -> None:
    """Refuse to time functions that disagree."""
    ours = keyslots(keys)
    if ours != [key_slot(key) for key in keys] or ours != [keyslot(key) for key in keys]:
        raise SystemExit("keyslot and redis.crc.key_slot disagree; not timing")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table, and return the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.keyslot")
    parser.add_argument("--keys", type=int, default=10_000, help="keys per round")
    parser.add_argument("--rounds", type=int, default=151, help="timed rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    keys = make_keys(args.keys)
    texts = [key.decode() for key in keys if b"\xff" not in key]
    check(keys)
    runs = contenders(keys, texts)
    times = measure({name: run for name, (run, _) in runs.items()}, args.rounds)
    rates = {name: size / statistics.median(times[name]) for name, (_, size) in runs.items()}
    ratios = {
        "keyslot / key_slot (bytes)": rates["bytes: stampede keyslot"]
        / rates["bytes: redis-py key_slot"],
        "keyslots / key_slot (bytes)": rates["bytes: stampede keyslots (batch)"]
        / rates["bytes: redis-py key_slot"],
        "keyslot / encode + key_slot (str)": rates["str:   stampede keyslot"]
        / rates["str:   redis-py encode + key_slot"],
        "keyslots / encode + key_slot (str)": rates["str:   stampede keyslots (batch)"]
        / rates["str:   redis-py encode + key_slot"],
    }
    print(
        f"Python {platform.python_version()}, redis-py {redis.__version__}; "
        f"{args.keys:,} keys per round, median of {args.rounds} rounds"
    )
    width = max(map(len, [*runs, *ratios]))
    for name, rate in rates.items():
        print(f"  {name:<{width}}  {rate / 1e6:6.2f} M keys/s")
    for name, ratio in ratios.items():
        print(f"  {name:<{width}}  {ratio:6.2f}x")
    figures: dict[str, Any] = {"keys_per_second": rates, "ratios": ratios, "rounds": args.rounds}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return figures


if __name__ == "__main__":
    main()
