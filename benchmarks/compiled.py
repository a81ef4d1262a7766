"""Pure Python against the compiled build (`STAMPEDE_COMPILE=1`): the hot pure functions.

    make compiled                                  # the wheel, unpacked in build/compiled/site
    python -m benchmarks.compiled [--rounds 5] [--seconds 0.2] [--ceiling 0] [--json out.json]
    python -m benchmarks.compiled --pure-only      # no compiled build: the pure rates alone

Envelope decode and encode, a 4-key `Observation` (four decodes), `judge` in stamp
and commit mode, a read's whole step (observe, then judge), `new_token`, and a
guarded write's request building (`requests_for`, a 4-key group on 3 shards), a
batch's `joined` call and its `split_codes`, in operations per second. The two
builds cannot share a process (their modules have one name), so each round runs
one subprocess per build, alternating pure, compiled, pure, ..., and the table
gives each one's median over the rounds and the ratio compiled / pure: machine
noise hits both alike. Each subprocess checks
which build it loaded (`stampede._compiled.status`).

`--ceiling N` then alternates N runs of `python -m benchmarks.ceiling --only
stampede` per build (`--ceiling-seconds` a slice) and reports the stamped read and
guarded write's share of the ceiling: what compiling buys end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "compiled" / "site"
BUILDS = ("pure", "compiled")

# (name, statement): run in the namespace `_namespace` makes.
OPS = (
    ("Envelope.decode", "decode(raw)"),
    ("Envelope.encode", "env.encode()"),
    ("Observation, 4 keys", "Observation(group, keys, raws)"),
    ("judge, stamp mode", "judge(obs)"),
    ("judge, commit mode", "judge(obs_commit)"),
    ("read step: observe + judge", "judge(Observation(group, keys, raws))"),
    ("new_token", "new_token()"),
    ("requests_for, 4 keys/3 shards", "requests_for(keys, values, parts, (), stamp)"),
    ("joined, 3 requests", "joined(requests)"),
    ("split_codes, 3 requests", "split_codes(requests, codes, 'shard')"),
)


def _namespace() -> dict[str, Any]:
    from stampede.topology._guard import joined, requests_for, split_codes
    from stampede.typing import GuardStamp
    from stampede.verdict import Mode, Observation, judge
    from stampede.wire import CLOCK_FLOOR, Envelope, encode_commit, new_token

    group = b"user:{42}"
    keys = tuple(b"user:{42}:%d" % i for i in range(4))
    env = Envelope(CLOCK_FLOOR + 12_345, new_token(), b"x" * 64)
    raws = (env.encode(),) * len(keys)
    record = Envelope(env.version, env.token, encode_commit(keys)).encode()
    # A guarded write's step per shard: the group's 4 keys on 3 shards (as in
    # benchmarks.ceiling), their requests, one batch's call and its codes back.
    stamp: GuardStamp = {"version": env.version, "token": env.token, "expire_at_ms": 0}
    stamp |= {"limit": 0, "keep_ms": 5000}
    parts = [[0, 3], [1], [2]]
    requests = requests_for(keys, raws, parts, (), stamp)
    return {
        "decode": Envelope.decode,
        "env": env,
        "raw": raws[0],
        "group": group,
        "keys": keys,
        "raws": raws,
        "Observation": Observation,
        "judge": judge,
        "obs": Observation(group, keys, raws),
        "obs_commit": Observation(group, keys, raws, Mode.COMMIT, record),
        "new_token": new_token,
        "requests_for": requests_for,
        "values": raws,
        "parts": parts,
        "stamp": stamp,
        "joined": joined,
        "requests": requests,
        "split_codes": split_codes,
        "codes": [1] * len(keys),
    }


def _rate(statement: str, namespace: dict[str, Any], seconds: float) -> float:
    """Operations per second of `statement`, timed for about `seconds`."""
    timer = timeit.Timer(statement, globals=namespace)
    number = 16
    while True:
        took = timer.timeit(number)
        if took >= seconds:
            return number / took
        number = max(number * 2, int(number * seconds / max(took, 1e-6) * 1.1))


def worker(seconds: float) -> None:
    """One build's rates, as a JSON line (run in a subprocess by `main`)."""
    from stampede import _compiled

    namespace = _namespace()
    rates = {name: _rate(statement, namespace, seconds) for name, statement in OPS}
    print(json.dumps({"status": _compiled.status(), "rates": rates}))


def _env(build: str, site: Path) -> dict[str, str]:
    first = site if build == "compiled" else ROOT / "src"
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(first), str(ROOT)])}


def _check(build: str, status: dict[str, str]) -> None:
    if set(status.values()) != {build}:
        raise SystemExit(f"the {build} run loaded {status}: not the {build} build")


def _run_worker(build: str, site: Path, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.compiled", "--worker", "--seconds", str(seconds)],
        cwd=ROOT, env=_env(build, site), check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    _check(build, got["status"])
    rates: dict[str, float] = got["rates"]
    return rates


def _run_ceiling(build: str, site: Path, seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ceiling.json"
        subprocess.run(
            [sys.executable, "-m", "benchmarks.ceiling", "--only", "stampede",
             "--seconds", str(seconds), "--cost-groups", "0", "--json", str(out)],
            cwd=ROOT, env=_env(build, site), check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        rows = json.loads(out.read_text())["rows"]
    return {
        f"stampede {kind}, share of the ceiling": rows[f"stampede {kind}"]["keys_per_s"]
        / rows[f"ceiling {kind}"]["keys_per_s"]
        for kind in ("read", "write")
    } | {
        f"stampede {kind}, client CPU us/op": rows[f"stampede {kind}"]["cpu_us_per_op"]
        for kind in ("read", "write")
    }


def _table(title: str, runs: dict[str, list[dict[str, float]]], fmt: str) -> dict[str, Any]:
    """Print each build's median (and range over the runs) and the ratio of the medians;
    return them with every run's figure."""
    builds = [b for b in BUILDS if runs[b]]
    names = list(runs[builds[0]][0])
    print(f"\n{title}")
    head = "".join(f"{b:>12} {'(range)':<25}" for b in builds)
    print(f"{'':30}{head}" + ("compiled/pure" * (len(builds) > 1)))
    out: dict[str, Any] = {}
    for name in names:
        row: dict[str, Any] = {}
        line = f"{name:30}"
        for b in builds:
            got = [r[name] for r in runs[b]]
            row[b] = {"median": statistics.median(got), "runs": got}
            spread = f"({min(got):{fmt}}-{max(got):{fmt}})"
            line += f"{row[b]['median']:>12{fmt}} {spread:<25}"
        if len(builds) > 1:
            row["ratio"] = row["compiled"]["median"] / row["pure"]["median"]
            line += f"{row['ratio']:12.2f}x"
        print(line)
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.2, help="per operation and round")
    parser.add_argument("--site", type=Path, default=SITE, help="the unpacked compiled wheel")
    parser.add_argument("--pure-only", action="store_true")
    parser.add_argument(
        "--ceiling", type=int, default=0, metavar="N", help="ceiling runs per build"
    )
    parser.add_argument("--ceiling-seconds", type=float, default=0.5)
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.seconds)
        return
    builds = BUILDS[:1] if args.pure_only else BUILDS
    if not args.pure_only and not (args.site / "stampede").is_dir():
        raise SystemExit(f"no compiled build in {args.site}: run `make compiled` first")
    ops: dict[str, list[dict[str, float]]] = {b: [] for b in BUILDS}
    for _ in range(args.rounds):
        for build in builds:
            ops[build].append(_run_worker(build, args.site, args.seconds))
    data = {}
    if args.rounds:
        data["ops"] = _table("operations per second: median (range) of the rounds", ops, ",.0f")
    if args.ceiling:
        ceiling: dict[str, list[dict[str, float]]] = {b: [] for b in BUILDS}
        for _ in range(args.ceiling):
            for build in builds:
                ceiling[build].append(_run_ceiling(build, args.site, args.ceiling_seconds))
        data["ceiling"] = _table(
            "benchmarks.ceiling --only stampede: median (range)", ceiling, ".3f"
        )
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
