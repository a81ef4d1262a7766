"""`python -m benchmarks` (and `make bench`): the whole suite, then the focused benchmarks.

Each one starts its own local redis-server processes and compares stampede with
raw redis-py on the same servers in the same run. Nothing here is asserted: the
figures go into docs/performance.md.
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
]


def main() -> None:
    for name in MODULES:
        print(f"\n===== {name} =====", flush=True)
        sys.argv = [name]
        runpy.run_module(name, run_name="__main__")


if __name__ == "__main__":
    main()
