"""Shared fixtures: a `Stampede` over each topology, on the real local servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from stampede import Stampede

from .support import open_stampede

# No property test may fail for taking long: `make test` runs on busy machines too
# (hypothesis's default 200 ms deadline per example failed one under load).
settings.register_profile("stampede", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("stampede")


@pytest.fixture(params=["shards", "cluster"])
def topology_env(request: pytest.FixtureRequest) -> tuple[str, Any]:
    """(kind, harness) for each topology, healed and with its data cleared."""
    kind = str(request.param)
    env = request.getfixturevalue("stampede_cluster" if kind == "cluster" else "stampede_primaries")
    return kind, env


@pytest.fixture
async def st(topology_env: tuple[str, Any]) -> AsyncIterator[Stampede]:
    """A connected `Stampede` over each topology in turn."""
    kind, env = topology_env
    async with open_stampede(env, kind) as client:
        yield client


@pytest.fixture
async def quick(topology_env: tuple[str, Any]) -> AsyncIterator[Stampede]:
    """`st` with short tombstone and version grace windows and transaction timeout."""
    kind, env = topology_env
    async with open_stampede(
        env, kind, tombstone_grace=0.05, version_grace=0.05, transaction_timeout=0.3
    ) as client:
        yield client
