"""The repair queue and worker under review: waiting on undecided transactions, dead
letters that happen once, late workers, requeue past malformed dead letters, a queue
key of another type and consumer names, each driven through the real servers."""

from __future__ import annotations

import asyncio

import pytest

from stampede import Stampede
from stampede.errors import ConfigurationError
from stampede.repair import NewestWins, RepairQueue
from stampede.repair._worker import Worker
from stampede.testing import LocalPrimaries

from ..support import run_cli


async def test_an_empty_consumer_name_is_refused(
    st: Stampede, stampede_primaries: LocalPrimaries
) -> None:
    """`Worker(consumer="")` and `stampede worker --consumer ''` fell back to the default
    name (host-pid) silently; both refuse it now, the CLI with exit 2 and no traceback."""
    queue = RepairQueue(st.topology)
    with pytest.raises(ConfigurationError, match="consumer name"):
        Worker(st.topology, queue, NewestWins(), consumer="")
    args = ["worker", "--url", stampede_primaries.urls[0], "--strategy", "newest-wins"]
    result = await asyncio.to_thread(run_cli, *args, "--consumer", "", "--burst", timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 2, err[-2000:]
    assert "--consumer" in err and "empty" in err and "Traceback" not in err
