"""The command line every example shares.

    python examples/NAME.py                          # three local primaries of its own
    python examples/NAME.py --url redis://a:6379 --url redis://b:6379 --url redis://c:6379
    python examples/NAME.py --url redis://node:7000 --cluster
    python examples/NAME.py --cluster                # a local three-master cluster

Each example module defines `async def main(urls, *, cluster=False)` that asserts
what it demonstrates; a failed assertion or error exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol


class Main(Protocol):
    def __call__(
        self, urls: Sequence[str], *, cluster: bool = False
    ) -> Coroutine[Any, Any, None]: ...


def run(main: Main, doc: str | None) -> None:
    """Parse `--url`/`--cluster`, start local servers when no URL is given, run `main`."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    parser.add_argument(
        "--url",
        action="append",
        default=[],
        help="a Redis URL; repeat for each independent primary (one startup node with --cluster)",
    )
    parser.add_argument("--cluster", action="store_true", help="the URL is a Redis Cluster node")
    args = parser.parse_args()
    try:
        if args.url:
            asyncio.run(main(args.url, cluster=args.cluster))
        else:
            from stampede.testing import LocalCluster, LocalPrimaries

            if args.cluster:
                with LocalCluster(3) as cluster:
                    asyncio.run(main([cluster.url], cluster=True))
            else:
                with LocalPrimaries(3) as primaries:
                    asyncio.run(main(primaries.urls))
    except Exception:
        traceback.print_exc()
        print("FAILED", file=sys.stderr)
        sys.exit(1)
    print("ok")
