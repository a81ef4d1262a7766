"""Concurrent writers and readers never see a mixed group reported as consistent."""

from __future__ import annotations

import asyncio
import random

import pytest

from stampede import Mode, RetryPolicy, Stampede, TornReadError
from stampede.results import ReadResult

from ..support import spread_keys

RETRY = RetryPolicy(attempts=6, base_delay=0.001, max_delay=0.01, deadline=30.0)
"""Short waits, but a deadline no busy machine reaches: the verdict is about mixing."""


def check_whole(result: ReadResult[str], mode: Mode) -> None:
    """Independently of the verdict: one token, one payload, and the matching record."""
    obs = result.observation
    assert obs is not None
    tokens = {env.token for env in obs.envelopes if env is not None}
    payloads = set(result.values.values())
    assert tokens == {result.token}, f"consistent read with tokens {tokens}"
    assert len(payloads) == 1, "consistent read mixes the payloads of several writes"
    if mode is Mode.COMMIT:
        record = obs.commit()
        assert record is not None and (record.version, record.token) == (
            result.version,
            result.token,
        )


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_twenty_writers_twenty_readers(st: Stampede, mode: Mode) -> None:
    """Under 20 writers and 20 readers no read is consistent but mixed; quiet reads are whole."""
    groups = {f"acct:{g}": spread_keys(st, f"acct:{g}") for g in range(3)}
    names = list(groups)
    stop = asyncio.Event()
    counts = {"writes": 0, "reads": 0, "consistent": 0, "torn": 0}

    def enough() -> None:
        """Run until the race has been exercised, however fast the machine is."""
        if counts["writes"] > 100 and counts["consistent"] > 50:
            stop.set()

    async def writer(w: int) -> None:
        rng = random.Random(w)
        seq = 0
        while not stop.is_set():
            group = rng.choice(names)
            seq += 1
            await st.write(group, dict.fromkeys(groups[group], f"w{w}-{seq}".encode()), mode=mode)
            counts["writes"] += 1
            enough()

    async def reader(r: int) -> None:
        rng = random.Random(1000 + r)
        while not stop.is_set():
            group = rng.choice(names)
            try:
                result = await st.read(group, groups[group], mode=mode, retry=RETRY)
            except TornReadError:
                counts["torn"] += 1
                continue
            counts["reads"] += 1
            if result.found:
                counts["consistent"] += 1
                check_whole(result, mode)
                enough()

    tasks = [asyncio.create_task(writer(i)) for i in range(20)]
    tasks += [asyncio.create_task(reader(i)) for i in range(20)]
    await stop.wait()
    await asyncio.gather(*tasks)
    assert counts["writes"] > 100 and counts["consistent"] > 50, counts
    for group, keys in groups.items():
        result = await st.read(group, keys, mode=mode, retry=RetryPolicy(attempts=1))
        assert result.consistent and result.found
        check_whole(result, mode)
