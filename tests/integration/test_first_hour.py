"""A user's first hour: the readiness check and connection keywords where people
reach for them (issue: a user's first hour and an operator's first night)."""

from __future__ import annotations

import pytest

import stampede
from stampede import ConfigurationError, Stampede
from stampede.options import ConnectOptions

from ..support import FAST


async def test_ping_reports_every_shard(st: Stampede) -> None:
    """`await st.ping()`: each shard's round trip in seconds, ok while all answer."""
    health = await st.ping()
    assert health.ok and set(health.latency) == set(st.topology.shard_names)
    assert all(0 <= t < 60 for t in health.latency.values()) and health.errors == {}


async def test_ping_names_a_shard_that_does_not_answer() -> None:
    """A shard nobody answers is in `errors` (no exception): ok is False."""
    st = stampede.connect(["redis://127.0.0.1:1"], connection=FAST)
    health = await st.ping(within=1.0)
    await st.aclose()
    assert not health.ok and list(health.errors) == ["127.0.0.1:1"]


def test_connection_keywords_can_be_given_flat() -> None:
    """connect(urls, socket_timeout=1) sets the connection option (it used to say
    "Extra inputs are not permitted"); a misspelt one lists the known names."""
    st = stampede.connect(["redis://a:1"], socket_timeout=1, connect_timeout=0.2)
    assert st.options.connection.socket_timeout == 1.0
    assert st.options.connection.connect_timeout == 0.2
    both = stampede.connect(
        ["redis://a:1"], connection=ConnectOptions(max_connections=7), socket_timeout=3
    )
    assert both.options.connection.max_connections == 7
    assert both.options.connection.socket_timeout == 3
    with pytest.raises(ConfigurationError, match=r"known options: .*socket_timeout"):
        stampede.connect(["redis://a:1"], sockettimeout=1)
