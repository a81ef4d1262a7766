"""`python -m benchmarks` (and `make bench`): the whole suite, then the focused benchmarks.

Each one starts its own local redis-server processes and compares stampede with
raw redis-py on the same servers in the same run. Nothing here is asserted: the
figures go into docs/performance.md. The exception is the key census, last: it
compares nothing and exits 1 when it finds a stampede key that is not needed and
never expires; this run then exits 1 too, once every benchmark has run.
"""

from __future__ import annotations

import runpy
import sys

MODULES = [
    "benchmarks.keyslot",
    "benchmarks.core",
    "benchmarks.suite",
    "benchmarks.fanout",
    "benchmarks.repair",
    "benchmarks.ramp",
    "benchmarks.ceiling",
    "benchmarks.durability",
    "benchmarks.server_cost",
    "benchmarks.census",
]


def main() -> None:
    failed = []
    for name in MODULES:
        print(f"\n===== {name} =====", flush=True)
        sys.argv = [name]
        try:
            runpy.run_module(name, run_name="__main__")
        except SystemExit as exc:  # a benchmark's verdict must not skip the ones after it
            if exc.code not in (0, None):
                failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
